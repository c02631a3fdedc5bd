// The pure rules behind tenant isolation (issue 17): whose images a tenant may name, the full
// names deploys pull, what a Dockerfile may ask of the engine, and the firewall's rule order.
// The engine-backed proofs are in isolation.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkDockerfile, pinImages } from '../src/builds/dockerfile.js';
import { readDockerfile } from '../src/builds/runner.js';
import { ValidationError } from '../src/errors.js';
import { EGRESS_CHAIN, FirewallError, HOST_CHAIN, HostFirewall, parseEgressAllow, shellIptablesCheck, type ChainRule, type ShellRun } from '../src/runtime/host-firewall.js';
import { fakeIptables } from './fake-iptables.js';
import { SWARM_GATEWAY_BRIDGE } from '../src/runtime/swarm/node-firewall.js';

const GW_EGRESS = SWARM_GATEWAY_BRIDGE.chains?.egress ?? 'none';
/** Two svcds' instance ids (instance.ts: 16 hex digits). */
const OWNER = '0123456789abcdef';
const OTHER = 'fedcba9876543210';
import { canonicalImageReference, tenantImageRefusal } from '../src/services/images.js';

const A = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
const B = 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb';
const owner = { tenantId: A, buildRegistry: '127.0.0.1:5000' };

describe('image ownership', () => {
  test("another tenant's build outputs are refused in every spelling; one's own are not", () => {
    for (const ref of [
      `svc/${B}/s:1`, `docker.io/svc/${B}/s:1`, `index.docker.io/svc/${B}/s:1`,
      `127.0.0.1:5000/svc/${B}/s:1`, `localhost:5000/svc/${B}/s:1`, `[::1]:5000/svc/${B}/s:1`, `127.0.0.2:5000/svc/${B}/s:1`,
      `127.0.0.1:5000/svc/${B}/s@sha256:${'c'.repeat(64)}`,
    ]) assert.match(tenantImageRefusal(ref, owner) ?? '', /build outputs/, ref);
    for (const ref of [`svc/${A}/s:1`, `127.0.0.1:5000/svc/${A}/s:1`, `localhost:5000/svc/${A}/s:1`]) assert.equal(tenantImageRefusal(ref, owner), null, ref);
  });
  test('image IDs are refused; ordinary names, digests and other loopback registries are not', () => {
    assert.match(tenantImageRefusal(`sha256:${'d'.repeat(64)}`, owner) ?? '', /image IDs/);
    assert.match(tenantImageRefusal('d'.repeat(64), owner) ?? '', /image IDs/);
    for (const ref of ['busybox', 'library/nginx:1.27', `nginx@sha256:${'e'.repeat(64)}`, '127.0.0.1:6000/svc/anything:1', 'svc-test/x:1']) {
      assert.equal(tenantImageRefusal(ref, owner), null, ref);
    }
    assert.match(tenantImageRefusal('ghcr.io/x/y', owner) ?? '', /Docker Hub or a loopback registry/);
    // Found on review: a leading zero is the same port to the engine; past 65535 is no port.
    assert.match(tenantImageRefusal(`127.0.0.1:05000/svc/${B}/s:1`, owner) ?? '', /Docker Hub or a loopback registry|invalid/);
    assert.match(tenantImageRefusal('127.0.0.1:99999/x:1', owner) ?? '', /Docker Hub or a loopback registry|invalid/);
  });
  test('deploys pull full names, which the engine never reads as an image ID', () => {
    assert.equal(canonicalImageReference('busybox'), 'docker.io/library/busybox:latest');
    assert.equal(canonicalImageReference('deadbeef'), 'docker.io/library/deadbeef:latest');
    assert.equal(canonicalImageReference('acme/app:2'), 'docker.io/acme/app:2');
    assert.equal(canonicalImageReference('index.docker.io/acme/app'), 'docker.io/acme/app:latest');
    assert.equal(canonicalImageReference(`nginx@sha256:${'e'.repeat(64)}`), `docker.io/library/nginx@sha256:${'e'.repeat(64)}`);
    assert.equal(canonicalImageReference('127.0.0.1:5000/x/y:3'), '127.0.0.1:5000/x/y:3');
  });
});

describe('Dockerfile rules', () => {
  const refused = (text: string, why: RegExp) => assert.throws(() => checkDockerfile(text, owner), (err: unknown) => err instanceof ValidationError && why.test(err.message), text);
  test('remote ADD is refused in every form, naming the line', () => {
    refused('FROM busybox\nADD https://example.com/x /x', /^Dockerfile line 2: ADD from a URL/);
    refused('FROM busybox\nADD ["http://example.com/x", "/x"]', /line 2: ADD from a URL/);
    refused('FROM busybox\nRUN true\nadd \\\n  git://example.com/r.git /r', /line 3: ADD from a URL/);
    refused('FROM busybox\nADD git@example.com:a/b.git /r', /ADD from a URL/);
    refused('# escape=`\nFROM busybox\nADD `\n  https://example.com/x /x', /line 3: ADD from a URL/);
    // Found on review: a URL split by a continuation, or held in a variable, or in a trigger.
    refused('FROM busybox\nADD http:/\\\n/169.254.169.254/x /m', /line 2: ADD from a URL/);
    refused('# escape=`\nFROM busybox\nADD http:/`\n/169.254.169.254/x /m', /line 3: ADD from a URL/);
    refused('FROM busybox\nARG U=http://169.254.169.254/x\nADD $U /m', /line 3: variables are not allowed in ADD/);
    refused('FROM busybox\nENV U=x\nADD ${U} /m', /variables are not allowed in ADD/);
    refused('FROM busybox AS a\nONBUILD ADD http://169.254.169.254/x /m\nFROM a', /line 2: ONBUILD is not allowed/);
  });
  test("FROM and COPY --from: the tenant's image rules, no variables, stages and scratch allowed", () => {
    refused(`FROM svc/${B}/s:1`, /line 1: images under svc\/ are build outputs/);
    refused('FROM ${BASE}', /variables are not allowed/);
    refused('FROM ghcr.io/x/y', /Docker Hub or a loopback registry/);
    refused(`FROM busybox\nCOPY --from=127.0.0.1:5000/svc/${B}/s:1 /a /b`, /line 2: images under svc\//);
    refused(`FROM sha256:${'d'.repeat(64)}`, /image IDs/);
    checkDockerfile('FROM scratch\nCOPY app /app', owner);
    checkDockerfile('FROM --platform=linux/amd64 busybox AS build\nRUN make\nFROM build\nCOPY --from=build /a /b\nCOPY --from=0 /c /d\nADD local.tar /x', owner);
  });
  test('the build is pinned to the checked copies: every image the check returned, by the ID of what was checked, and nothing else', () => {
    const text = [
      '# escape=`',
      'FROM --platform=linux/amd64 `',
      '  busy`',
      'box:1 AS build',
      'RUN echo busybox:1',
      'FROM build',
      'COPY --from=build /a /b',
      'COPY --from=0 /c /d',
      'COPY --from=127.0.0.1:5000/tools:2 /e /f',
      'FROM scratch',
      'FROM alpine\r',
      'COPY --from=busybox:1 /g /h',
      '',
    ].join('\n');
    const images = checkDockerfile(text, owner);
    assert.deepEqual(images, ['busybox:1', '127.0.0.1:5000/tools:2', 'alpine']);
    const ids = new Map(images.map((image, i) => [image, `sha256:${String(i).repeat(64)}`]));
    const pinned = pinImages(text, ids);
    assert.equal(
      pinned,
      [
        '# escape=`',
        `FROM --platform=linux/amd64 \`\n  sha256:${'0'.repeat(64)} AS build`,
        'RUN echo busybox:1',
        'FROM build',
        'COPY --from=build /a /b',
        'COPY --from=0 /c /d',
        `COPY --from=sha256:${'1'.repeat(64)} /e /f`,
        'FROM scratch',
        `FROM sha256:${'2'.repeat(64)}\r`,
        `COPY --from=sha256:${'0'.repeat(64)} /g /h`,
        '',
      ].join('\n'),
    );
    // What it names now is IDs and stages: nothing for the engine to look up by name.
    assert.deepEqual(checkDockerfile(pinned.replaceAll(/sha256:[0-9]{64}/g, 'ok'), owner), ['ok']);
    assert.throws(() => pinImages(text, new Map([['busybox:1', `sha256:${'0'.repeat(64)}`]])), /could not be pinned to the checked copy of 127\.0\.0\.1:5000\/tools:2/, 'an image left by name fails the build');
  });
  test("what Docker's parser and the check would read differently is refused (found on review)", () => {
    // A carriage return alone: a line break to the check, whitespace to Docker (which would fetch the URL).
    refused('FROM busybox\nADD \rhttp://127.0.0.1:1/x /x', /^Dockerfile line 2: character U\+000D is not allowed/);
    refused('FROM\vbusybox', /line 1: character U\+000B/);
    refused('FROM busybox\n\fFROM busybox', /line 2: character U\+000C/);
    refused('FROM busybox\n\u00A0FROM ghcr.io/x/y', /line 2: character U\+00A0/);
    refused('\uFEFFFROM busybox', /line 1: character U\+FEFF/);
    // Directives Docker does not know end its directives (an escape after one is a comment to
    // it), and the check reads a directive with trailing spaces as the last: either way the two
    // would continue lines with different characters.
    refused('# x=y\n# escape=`\nFROM busybox\nRUN true #`\nFROM busybox', /parser directives must be the first lines/);
    refused('# syntax=docker/dockerfile:1 \n# escape=`\nFROM busybox', /parser directives must be the first lines/);
    // Docker takes the quotes out of a flag's name.
    refused(`FROM busybox\nCOPY --"from"=svc/${B}/s:1 /a /b`, /line 2: quotes and escape characters are not allowed in flags/);
    // Found on the next review: an ADD of a URL hidden by JSON escapes, an escaped escape at a
    // line's end, several "directives" on one line, a comment inside a continued keyword, a
    // heredoc's quoted delimiter; an unchecked --from by bytes Docker splits flags on.
    refused('FROM alpine\nADD ["http\\u003a//169.254.169.254/latest/meta-data/", "/m"]', /line 2: backslashes are not allowed in the JSON form/);
    refused('FROM alpine\nRUN echo \\\\\nADD http://169.254.169.254/ /m', /line 2: a line may not end in/);
    refused('#a=1 #b=2 #c=3\nFROM alpine\nADD http://169.254.169.254/ /m\nFROM alpine', /parser directives must be the first lines/);
    refused('FROM alpine\nAD\\\n#x\nD http://169.254.169.254/ /m', /line 3: a comment within a continued instruction/);
    // Found on the fourth review: the same with a blank line first (which ended the rule's
    // continuation), and any keyword Docker does not know (the half of a split one).
    refused('FROM alpine\nAD\\\n\n# x\nD http://169.254.169.254/ /m', /line 4: a comment within a continued instruction/);
    assert.throws(() => checkDockerfile('FROM alpine\nAD x\nD http://169.254.169.254/ /m', owner), /line 2: unknown instruction AD/);
    assert.deepEqual(checkDockerfile('FROM alpine\nRUN a \\\n\n  b', owner), ['alpine'], 'a blank line within a continuation is read');
    refused('FROM alpine\nRUN <<E"O"F\nEOF\nADD http://169.254.169.254/ /m', /line 2: heredocs/);
    refused(`FROM alpine\nCOPY --chown=0:0\u00e0--from=svc/${B}/s:1 /secret /x`, /line 2: non-ASCII characters are allowed only in comments/);
    refused('FROM alpine\nRUN echo \uFFFD', /line 2: character U\+FFFD/);
    // Found on the third review: quotes Docker takes out of an ADD source, a URL with `--` in it
    // (dockerfile-ast counts it as a flag, and drops it from the arguments), a --from behind a
    // flag value with a space, and an escape character in a flag.
    refused('FROM alpine\nADD "http"://169.254.169.254/latest/meta-data/ /m', /line 2: ADD from a URL/);
    refused("FROM alpine\nADD ['http'://169.254.169.254/x', '/m']", /line 2: ADD from a URL/);
    refused('FROM alpine\nADD ["\'http\'://169.254.169.254/x","/m"]', /line 2: ADD from a URL/);
    refused('FROM alpine\nADD h\\ttp://169.254.169.254/x /m', /line 2: ADD from a URL/);
    refused('FROM alpine\nADD http://xn--e1afmkfd.example/x --f /d/', /line 2: `--` is allowed only in the flags before the sources/);
    refused(`FROM alpine\nCOPY --chown="a b" --from=svc/${B}/s:1 /secret /x`, /line 2: quotes and escape characters are not allowed in flags/);
    refused(`FROM alpine\nCOPY --chown=a\\ b --from=svc/${B}/s:1 /secret /x`, /line 2: quotes and escape characters are not allowed in flags/);
    // Still read: flags before the sources, a continued instruction, a quoted COPY source.
    assert.deepEqual(checkDockerfile('FROM busybox AS b\nFROM alpine\nCOPY --chown=1:1 \\\n  --from=b /a "/b c"', owner), ['busybox', 'alpine']);
    // Still read: non-ASCII in comments, continuations, the JSON form without escapes.
    assert.deepEqual(checkDockerfile('# café\nFROM busybox\nRUN echo a \\\n  b\nADD ["local.tar", "/x"]', owner), ['busybox']);
    // Still read: directives as Docker reads them, and CRLF line ends.
    assert.deepEqual(checkDockerfile('# syntax=docker/dockerfile:1\n# escape=`\nFROM busybox\nADD local.tar `\n  /x', owner), ['busybox']);
    assert.deepEqual(checkDockerfile('FROM busybox\r\nRUN true\r\n', owner), ['busybox']);
  });
  test("a stage's name names the stage once it has ended, as Docker's builder reads it", () => {
    // Inside stage foo, --from=foo is the image foo: checked, pulled and pinned like any image.
    assert.deepEqual(checkDockerfile('FROM busybox AS foo\nCOPY --from=foo /a /b', owner), ['busybox', 'foo']);
    refused(`FROM busybox AS 127.0.0.1:5000/svc/${B}/s:1\nCOPY --from=127.0.0.1:5000/svc/${B}/s:1 /a /b`, /line 2: images under svc\//);
    assert.deepEqual(checkDockerfile('FROM busybox AS foo\nFROM alpine\nCOPY --from=foo /a /b\nFROM foo', owner), ['busybox', 'alpine']);
  });
});

describe('the Dockerfile the check reads', () => {
  test('is a regular file: a symlink (which svcd and the engine would resolve differently) is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-dockerfile-'));
    try {
      writeFileSync(join(dir, 'Dockerfile'), 'FROM busybox\n');
      assert.equal(readDockerfile(dir), 'FROM busybox\n', 'a regular file is read');
      rmSync(join(dir, 'Dockerfile'));
      mkdirSync(join(dir, 'dev'));
      writeFileSync(join(dir, 'dev', 'null'), 'FROM busybox\nADD http://169.254.169.254/ /m\n');
      symlinkSync('/dev/null', join(dir, 'Dockerfile'));
      assert.throws(() => readDockerfile(dir), /must be a regular file/);
      rmSync(join(dir, 'Dockerfile'));
      assert.throws(() => readDockerfile(dir), /no Dockerfile/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('egress firewall', () => {
  test('--egress-allow entries', () => {
    assert.deepEqual(parseEgressAllow('10.0.0.5, 192.168.1.0/24:5000'), [{ cidr: '10.0.0.5/32', port: null }, { cidr: '192.168.1.0/24', port: 5000 }]);
    assert.deepEqual(parseEgressAllow(undefined), []);
    // As iptables prints it back: the host bits of a network cleared.
    assert.deepEqual(parseEgressAllow('10.1.2.3/8,192.168.7.200/25:53,1.2.3.4/0'), [
      { cidr: '10.0.0.0/8', port: null },
      { cidr: '192.168.7.128/25', port: 53 },
      { cidr: '0.0.0.0/0', port: null },
    ]);
    for (const bad of ['10.0.0.256', '10.0.0.0/33', '10.0.0.1:0', 'example.com', '::1']) assert.throws(() => parseEgressAllow(bad), /--egress-allow/, bad);
    // iptables would read 010.0.0.1 as 8.0.0.1.
    for (const octal of ['010.0.0.1', '10.0.0.01/32:53', '10.00.0.1']) assert.throws(() => parseEgressAllow(octal), /without leading zeros/, octal);
    assert.deepEqual(parseEgressAllow('0.0.0.0/0,10.0.0.0'), [{ cidr: '0.0.0.0/0', port: null }, { cidr: '10.0.0.0/32', port: null }], 'a zero alone is no leading zero');
    assert.deepEqual(parseEgressAllow('10.0.0.5/8,10.0.0.0/8,10.0.0.0/8:53,10.1.1.1/8:53'), [{ cidr: '10.0.0.0/8', port: null }, { cidr: '10.0.0.0/8', port: 53 }], 'one network once');
  });

  test('install: chains complete before the jumps, allowances ahead of the rejects, idempotent; close removes only the allowances', async () => {
    const { rules, calls, fake } = fakeIptables();
    const key = (r: string[]) => r.join(' ');
    const fw = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }], owner: OWNER, iptables: fake });
    assert.equal(await fw.missing(), 'missing rule in DOCKER-USER: -i svc-+ -j SVC-TENANT-EGRESS');
    await fw.install();
    assert.equal(await fw.missing(), null);
    const egress = rules.get(EGRESS_CHAIN)!.map(key);
    const firstReject = egress.findIndex((r) => r.includes('REJECT'));
    assert.ok(egress.findIndex((r) => r.includes('10.9.0.0/16')) < firstReject, 'the allowance comes before the rejects');
    assert.ok(egress.includes(`-d 10.9.0.0/16 -p tcp --dport 5000 -m comment --comment svc-egress-allow-${OWNER}-10-9-0-0_16_5000 -j RETURN`), egress.join('\n'));
    assert.ok(egress.some((r) => r.startsWith('-d 169.254.0.0/16') && r.endsWith('REJECT --reject-with icmp-admin-prohibited')));
    assert.equal(rules.get(HOST_CHAIN)!.map(key).at(-1), '-j REJECT --reject-with icmp-admin-prohibited');
    const firstJump = calls.findIndex((c) => c[0] === '-I' && (c[1] === 'INPUT' || c[1] === 'DOCKER-USER'));
    const chainRules = calls.map((c, i) => ((c[0] === '-A' || c[0] === '-I') && (c[1] === EGRESS_CHAIN || c[1] === HOST_CHAIN) ? i : -1));
    const lastChainRule = Math.max(...chainRules);
    assert.ok(lastChainRule < firstJump, 'no traffic is sent to a half-built chain');
    const count = [...rules.values()].reduce((n, l) => n + l.length, 0);
    await new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }], owner: OWNER, iptables: fake }).install();
    assert.equal([...rules.values()].reduce((n, l) => n + l.length, 0), count, 'a second install (the next start) adds nothing');
    await fw.close();
    assert.ok(!rules.get(EGRESS_CHAIN)!.some((r) => key(r).includes('10.9.0.0/16')), 'its allowances are gone');
    assert.equal(await new HostFirewall({ allow: [], owner: OTHER, iptables: fake }).missing(), null, 'the shared rules stay for the other svcd on the host');
  });

  test("two svcds on one host that name the same entry each have their own rule: a stop, or a failed start, removes its own and never the other's", async () => {
    const { rules, fake } = fakeIptables();
    const entry = (cidr: string) => (r: string[]) => r.join(' ').includes(cidr);
    const running = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }], owner: OWNER, iptables: fake });
    await running.install();
    const second = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }, { cidr: '10.8.0.0/16', port: null }], owner: OTHER, iptables: fake });
    await second.install();
    const egress = rules.get(EGRESS_CHAIN)!;
    assert.equal(egress.filter(entry('10.9.0.0/16')).length, 4, 'a TCP and a UDP rule for each of the two');
    await second.close();
    assert.ok(!egress.some(entry('10.8.0.0/16')), 'its own entry is gone');
    assert.equal(egress.filter(entry('10.9.0.0/16')).length, 2, "the running svcd's copy of the shared entry stays");
    assert.equal(await running.missing(), null, 'the running svcd misses nothing');
    await running.close();
    assert.ok(!egress.some(entry('10.9.0.0/16')));
  });

  test("a start removes the allowances an earlier run of its own left that its flags no longer name (it was killed), not another svcd's", async () => {
    const { rules, fake } = fakeIptables();
    const entry = (cidr: string) => (r: string[]) => r.join(' ').includes(cidr);
    // A run that was killed: its rules stay behind.
    await new HostFirewall({ allow: [{ cidr: '10.7.0.0/16', port: null }, { cidr: '10.9.0.0/16', port: 5000 }], owner: OWNER, iptables: fake }).install();
    await new HostFirewall({ allow: [{ cidr: '10.7.0.0/16', port: null }], owner: OTHER, iptables: fake }).install();
    const egress = rules.get(EGRESS_CHAIN)!;
    const host = rules.get(HOST_CHAIN)!;
    // The operator took 10.7.0.0/16 out and starts it again.
    const next = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }], owner: OWNER, iptables: fake });
    await next.install();
    assert.equal(await next.missing(), null);
    const own7 = (r: string[]) => r.includes(`svc-egress-allow-${OWNER}-10-7-0-0_16`);
    assert.ok(!egress.some(own7) && !host.some(own7), 'the entry taken out is gone from both chains');
    assert.equal(egress.filter(entry('10.7.0.0/16')).length, 1, "the other svcd's rule of the same entry stays");
    assert.equal(egress.filter(entry('10.9.0.0/16')).length, 2, 'the entry still named stays, once');
    await next.close();
    const named = (r: string[]) => r.some((word) => word.startsWith(`svc-egress-allow-${OWNER}-`));
    assert.ok(!egress.some(named) && !host.some(named), 'its own allowances are gone at its stop');
    assert.equal(egress.filter(entry('10.7.0.0/16')).length, 1, "the other svcd's stays");
  });

  test("the sweep removes only this svcd's own allowances of entries it no longer names: not an operator's rule, another svcd's, nor an earlier svc's (reported)", async () => {
    const { rules, fake } = fakeIptables();
    await new HostFirewall({ allow: [{ cidr: '10.7.0.0/16', port: 53 }], owner: OWNER, iptables: fake }).install();
    await new HostFirewall({ allow: [{ cidr: '10.7.0.0/16', port: 53 }], owner: OTHER, iptables: fake }).install();
    const egress = rules.get(EGRESS_CHAIN)!;
    const host = rules.get(HOST_CHAIN)!;
    const theirs = [
      ['-d', '10.7.0.0/16', '-m', 'comment', '--comment', 'svc: --egress-allow', '-j', 'RETURN'], // an earlier svc's (listed in quotes)
      ['-d', '10.7.0.0/16', '-m', 'comment', '--comment', 'operator', '-j', 'RETURN'],
      ['-d', '10.7.0.0/16', '-j', 'RETURN'],
      ['-d', '10.7.0.0/16', '-m', 'comment', '--comment', `svc-egress-allow-${OWNER}-not-an-entry`, '-j', 'RETURN'],
    ];
    egress.unshift(...theirs);
    const next = new HostFirewall({ allow: [], owner: OWNER, iptables: fake });
    await next.install();
    assert.ok(!egress.some((r) => r.some((w) => w.startsWith(`svc-egress-allow-${OWNER}-10-`))) && !host.some((r) => r.some((w) => w.startsWith(`svc-egress-allow-${OWNER}-10-`))), 'its own are gone');
    assert.equal(egress.filter((r) => r.includes(`svc-egress-allow-${OTHER}-10-7-0-0_16_53`)).length, 2, "the other svcd's stay");
    for (const rule of theirs) assert.ok(egress.includes(rule), rule.join(' '));
    assert.deepEqual(next.unownedAllowances, ['-A SVC-TENANT-EGRESS -d 10.7.0.0/16 -m comment --comment "svc: --egress-allow" -j RETURN'], "an earlier svc's rule is reported");
  });

  test('an allowance of its own that cannot be removed fails the install (production does not start) and the stop says so', async () => {
    const { rules, fake } = fakeIptables();
    await new HostFirewall({ allow: [{ cidr: '10.7.0.0/16', port: null }], owner: OWNER, iptables: fake }).install();
    const refusingDeletes: typeof fake = (args) => (args[0] === '-D' ? Promise.reject(new Error('iptables: Bad rule')) : fake(args));
    const next = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: null }], owner: OWNER, iptables: refusingDeletes });
    await assert.rejects(next.install(), (err: Error) => err instanceof FirewallError && err.message.includes(`svc-egress-allow-${OWNER}-10-7-0-0_16`));
    await assert.rejects(next.close(), new RegExp(`svc-egress-allow-${OWNER}-10-9-0-0_16`));
    assert.ok(rules.get(EGRESS_CHAIN)!.some((r) => r.includes(`svc-egress-allow-${OWNER}-10-7-0-0_16`)), 'still there: the error says so, nothing pretends otherwise');
  });

  test("a swarm node's allowances are shared by the swarm's svcds: not named after one, and no close removes them", async () => {
    const { rules, fake } = fakeIptables({ INPUT: [], FORWARD: [] });
    const fw = new HostFirewall({ allow: [{ cidr: '10.9.0.0/16', port: 5000 }], owner: null, iptables: fake, tenants: SWARM_GATEWAY_BRIDGE });
    await fw.install();
    const allowances = () => rules.get(GW_EGRESS)!.filter((r) => r.join(' ').includes('10.9.0.0/16'));
    assert.equal(allowances().length, 2);
    assert.ok(allowances().every((r) => r.includes('svc: --egress-allow')));
    await fw.close();
    assert.equal(allowances().length, 2);
  });

  test("a swarm node's gateway bridge: the jump is FORWARD's first rule, put back first (never absent meanwhile, no rule deleted by number) when Docker's rules came before it, and nothing passes between the bridge's members", async () => {
    // As Engine 20.10 leaves a node: its accept for docker_gwbridge above the jump to DOCKER-USER.
    const { rules, calls, fake } = fakeIptables({ INPUT: [], 'DOCKER-USER': [['-j', 'RETURN']], FORWARD: [['-i', 'docker_gwbridge', '!', '-o', 'docker_gwbridge', '-j', 'ACCEPT'], ['-j', 'DOCKER-USER']] });
    const isJump = (r: string[]) => /^-i docker_gwbridge -m comment --comment svc-egress-[ab] -j SVC-GW-EGRESS$/.test(r.join(' '));
    const fw = new HostFirewall({ allow: [], owner: null, iptables: fake, tenants: SWARM_GATEWAY_BRIDGE });
    assert.match((await fw.missing()) ?? '', /missing rule in INPUT/);
    await fw.install();
    const forward = rules.get('FORWARD')!;
    assert.ok(isJump(forward[0]!), forward[0]!.join(' '));
    assert.equal(rules.get('DOCKER-USER')!.length, 1, 'DOCKER-USER is left alone');
    assert.equal(rules.get('INPUT')![0]!.join(' '), '-i docker_gwbridge -j SVC-GW-HOST');
    assert.ok(!rules.get(GW_EGRESS)!.some((r) => r.includes('-o')), 'no return for traffic within the shared bridge');
    assert.equal(rules.get(EGRESS_CHAIN), undefined, "the host's own chains are not the gateway's");
    assert.equal(await fw.missing(), null);
    // Docker moves its jump to DOCKER-USER back to the top whenever the node makes a network:
    // the operator's chain above svc's jump is as it should be.
    forward.splice(forward.findIndex((r) => r.join(' ') === '-j DOCKER-USER'), 1);
    forward.unshift(['-j', 'DOCKER-USER']);
    assert.equal(await fw.missing(), null);
    // Docker's accept for the bridge inserted above it again: present but no longer first.
    forward.unshift(['-i', 'docker_gwbridge', '!', '-o', 'docker_gwbridge', '-j', 'ACCEPT']);
    assert.match((await fw.missing()) ?? '', /is not the first rule of FORWARD/);
    const before = forward.length;
    // The chain never lacks a jump: checked after every call of the move.
    const watched = fake;
    let gaps = 0;
    const watching = async (args: string[]) => {
      const out = await watched(args);
      if (!forward.some(isJump)) gaps++;
      return out;
    };
    calls.length = 0;
    await new HostFirewall({ allow: [], owner: null, iptables: watching, tenants: SWARM_GATEWAY_BRIDGE }).install();
    assert.equal(gaps, 0, 'FORWARD was without the jump for a moment');
    assert.ok(!calls.some((c) => c[0] === '-D' && /^\d+$/.test(c[2] ?? '')), 'no delete by rule number (Docker renumbers FORWARD at will)');
    assert.equal(forward.filter(isJump).length, 1, 'moved, not copied');
    assert.ok(isJump(forward[0]!));
    assert.equal(forward.length, before, 'nothing else deleted');
    assert.equal(await fw.missing(), null);
    // Both forms in the chain and neither first (a move cut off half way): one stays, first.
    const other = forward[0]!.join(' ').endsWith('svc-egress-a -j SVC-GW-EGRESS') ? 'svc-egress-b' : 'svc-egress-a';
    forward.push(['-i', 'docker_gwbridge', '-m', 'comment', '--comment', other, '-j', 'SVC-GW-EGRESS']);
    forward.unshift(['-j', 'ACCEPT']);
    await new HostFirewall({ allow: [], owner: null, iptables: watching, tenants: SWARM_GATEWAY_BRIDGE }).install();
    assert.equal(gaps, 0, 'FORWARD was without the jump for a moment');
    assert.equal(forward.filter(isJump).length, 1);
    assert.ok(isJump(forward[0]!));
    // An empty FORWARD gets it too.
    const empty = fakeIptables({ INPUT: [], FORWARD: [] });
    await new HostFirewall({ allow: [], owner: null, iptables: empty.fake, tenants: SWARM_GATEWAY_BRIDGE }).install();
    assert.ok(isJump(empty.rules.get('FORWARD')![0]!));
    assert.equal(await new HostFirewall({ allow: [], owner: null, iptables: empty.fake, tenants: SWARM_GATEWAY_BRIDGE }).missing(), null);
    // Only replies pass established (a flow a task opened while the rules were away is cut).
    assert.ok(rules.get(GW_EGRESS)!.some((r) => r.join(' ') === '-m conntrack --ctstate RELATED,ESTABLISHED --ctdir REPLY -j RETURN'));
    // One batched check answers for every rule where the runner has one (an exec on a node).
    let batches = 0;
    const batched = new HostFirewall({ allow: [], owner: null, iptables: fake, tenants: SWARM_GATEWAY_BRIDGE, check: (wanted) => {
      batches++;
      return Promise.all(wanted.map(([chain, rule]) => fake(['-C', chain, ...rule]).then(() => true, () => false)));
    } });
    assert.equal(await batched.missing(), null);
    await batched.install();
    assert.equal(batches, 3, "missing(): one check; install(): one for the chains, one for INPUT's jump (FORWARD's first rule is read with -S)");
  });
  test('the rules are checked in one shell, a line each, and an answer that is not exactly that fails the check', async () => {
    const rules: ChainRule[] = [
      ['INPUT', ['-i', 'svc-+', '-j', HOST_CHAIN]],
      [EGRESS_CHAIN, ['-d', '10.9.0.0/16', '-m', 'comment', '--comment', "svc's allowance", '-j', 'RETURN']],
      [EGRESS_CHAIN, ['-d', '10.0.0.0/8', '-j', 'REJECT']],
    ];
    const scripts: string[] = [];
    const answering = (output: string, exitCode = 0): ShellRun => (script) => {
      scripts.push(script);
      return Promise.resolve({ exitCode, output });
    };
    assert.deepEqual(await shellIptablesCheck(answering('1\n0\n1\n'))(rules), [true, false, true]);
    assert.equal(scripts.length, 1, 'one shell for every rule');
    const lines = scripts[0]!.split('\n');
    assert.equal(lines.length, 3);
    assert.equal(lines[1], `if iptables -w -C '${EGRESS_CHAIN}' '-d' '10.9.0.0/16' '-m' 'comment' '--comment' 'svc'\\''s allowance' '-j' 'RETURN' >/dev/null 2>&1; then echo 1; else echo 0; fi`);
    await shellIptablesCheck(answering('1\n'), 'ip6tables')([rules[0]!]);
    assert.match(scripts.at(-1) ?? '', /^if ip6tables -w -C /);
    // A rule read as in place is one install() does not add: nothing but a 0 or 1 a rule passes.
    // (iptables' own output, a missing iptables's complaint included, goes to /dev/null: each line is the script's.)
    for (const [output, exitCode] of [['1\n0\n', 0], ['1\n0\n1\n1\n', 0], ['1\nyes\n1\n', 0], ['1\n0\n1\n', 2], ['spawn sh ENOENT', 127], ['', 0]] as const) {
      await assert.rejects(shellIptablesCheck(answering(output, exitCode))(rules), /the rules could not be checked/, JSON.stringify([output, exitCode]));
    }
    assert.deepEqual(await shellIptablesCheck(answering('garbage', 1))([]), [], 'no rules: no shell');
    assert.equal(scripts.length, 8);
  });
  test("a long --egress-allow is checked in scripts that fit one of sh's arguments, the answers in the rules' order", async () => {
    // 400 allowances with a port are 1,600 rules of about 180 bytes: past Linux's 128 KiB for one argument.
    const allow = parseEgressAllow(Array.from({ length: 400 }, (_, i) => `10.${String(Math.floor(i / 250))}.${String(i % 250)}.1/32:${String(1000 + i)}`).join(','));
    const sizes: number[] = [];
    let shells = 0;
    // Missing: the rules of every third port. The shell answers each line from its own words, so
    // an answer that landed on another rule's place would show.
    const missing = (text: string) => {
      const port = /--dport'? '?(\d+)/.exec(text)?.[1];
      return port !== undefined && Number(port) % 3 === 0;
    };
    const check = shellIptablesCheck((script) => {
      shells++;
      sizes.push(Buffer.byteLength(script));
      return Promise.resolve({ exitCode: 0, output: script.split('\n').map((line) => (missing(line) ? '0' : '1')).join('\n') });
    });
    const { fake } = fakeIptables();
    const rules: ChainRule[] = [];
    await new HostFirewall({ allow, owner: OWNER, iptables: fake, check: (wanted) => {
      rules.push(...wanted);
      return Promise.resolve(wanted.map(() => false));
    } }).install();
    const present = await check(rules);
    assert.ok(rules.length > 1600, String(rules.length));
    assert.ok(shells > 2 && sizes.every((n) => n <= 64 * 1024), `${String(shells)} scripts of ${sizes.join(', ')} bytes`);
    assert.deepEqual(present, rules.map(([chain, rule]) => !missing([chain, ...rule].join(' '))));
    assert.ok(present.includes(false) && present.includes(true));
  });
});
