// Which git sources a build may clone: pure rules, with name resolution injected (and, for
// `localhost`, the real resolver).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { checkSourceRef, checkSourceUrl, type ResolveHost } from '../src/sources/sources.js';

const names: Record<string, string[]> = {
  'github.example': ['140.82.121.3'],
  'intranet.example': ['10.1.2.3'],
  'metadata.example': ['169.254.169.254'],
  'v6private.example': ['fd00::1'],
  'mixed.example': ['140.82.121.3', '192.168.1.1'],
  'sneaky.example': ['::ffff:10.0.0.1'],
  'myself.example': ['127.0.0.1'],
};
const resolve: ResolveHost = async (host) => names[host] ?? [];
const strict = { allowLoopback: false };
const dev = { allowLoopback: true };

describe('build sources', () => {
  test('https:// and git:// to public addresses are accepted, names and literals alike', async () => {
    for (const url of ['https://github.example/acme/app.git', 'git://github.example/acme/app', 'https://140.82.121.3/x.git', 'https://[2606:4700::1]/x.git']) {
      assert.equal((await checkSourceUrl(url, strict, resolve)).url, url);
    }
  });

  test('other schemes, credentials and unresolvable hosts are 400', async () => {
    const cases: Array<[string, RegExp]> = [
      ['http://github.example/x.git', /https:\/\/ or git:\/\//],
      ['ssh://git@github.example/x.git', /https:\/\/ or git:\/\//],
      ['file:///etc/passwd', /https:\/\/ or git:\/\//],
      ['not-a-url', /https:\/\/ or git:\/\//],
      ['not a url', /must not contain whitespace/],
      ['https://user:secret@github.example/x.git', /credentials/],
      ['https://nowhere.example/x.git', /does not resolve/],
    ];
    for (const [url, msg] of cases) await assert.rejects(checkSourceUrl(url, strict, resolve), msg, url);
  });

  test('private, link-local and mapped addresses are refused, also behind a name', async () => {
    for (const url of [
      'https://10.0.0.1/x.git', 'https://192.168.1.10/x.git', 'https://172.16.5.4/x.git', 'https://169.254.169.254/x',
      'https://[fe80::1]/x.git', 'https://[fd12::1]/x.git', 'https://0.0.0.0/x.git', 'https://[::ffff:10.0.0.1]/x.git',
      'https://intranet.example/x.git', 'https://metadata.example/x', 'https://v6private.example/x',
      'https://mixed.example/x.git', 'https://sneaky.example/x.git',
    ]) {
      await assert.rejects(checkSourceUrl(url, strict, resolve), (err: Error & { status?: number }) => err.status === 400 && /public address/.test(err.message), url);
    }
  });

  test('loopback only when the operator allows it (then http:// too); never by default', async () => {
    for (const url of ['https://127.0.0.1/x.git', 'git://127.0.0.1:9418/x', 'https://myself.example/x.git', 'https://[::1]/x.git']) {
      await assert.rejects(checkSourceUrl(url, strict, resolve), /loopback is refused/, url);
    }
    for (const url of ['http://127.0.0.1:8080/x.git', 'git://127.0.0.1:9418/x', 'https://myself.example/x.git']) {
      assert.equal((await checkSourceUrl(url, dev, resolve)).url, url);
    }
    // The real resolver: localhost is loopback.
    await assert.rejects(checkSourceUrl('https://localhost/x.git', strict), /loopback is refused/);
    assert.equal((await checkSourceUrl('http://localhost:9/x.git', dev)).url, 'http://localhost:9/x.git');
    await assert.rejects(checkSourceUrl('http://github.example/x.git', dev, resolve), /https:\/\/ or git:\/\//, 'http:// stays loopback-only');
  });

  test('the URL git gets is rebuilt from the parsed parts: scheme and host lower-cased, IPv6 in RFC 5952 form, nothing else changed', async () => {
    const cases: Array<[string, string]> = [
      ['HTTPS://GitHub.Example/Acme/App.git', 'https://github.example/Acme/App.git'],
      ['https://github.example:8443/x.git', 'https://github.example:8443/x.git'],
      ['git://github.example/~user/x%20y', 'git://github.example/~user/x%20y'],
      ['https://[2606:4700:0:0:0:0:0:1]/x', 'https://[2606:4700::1]/x'],
      ['https://[::ffff:140.82.121.3]/x', 'https://[::ffff:8c52:7903]/x'],
      ['https://xn--bcher-kva.example/x', 'https://xn--bcher-kva.example/x'],
      ['https://XN--LS8H.example/x', 'https://xn--ls8h.example/x'],
    ];
    const anyPublic: ResolveHost = async () => ['140.82.121.3'];
    for (const [raw, rebuilt] of cases) assert.equal((await checkSourceUrl(raw, strict, anyPublic)).url, rebuilt, raw);
  });

  test('spellings parsers disagree on are refused before anything resolves them', async () => {
    let resolved = 0;
    const counting: ResolveHost = async () => {
      resolved++;
      return ['140.82.121.3'];
    };
    const cases: Array<[string, RegExp]> = [
      ['https://github.example\\@x/x', /backslash/],
      ['https://github.example/a\tb', /whitespace/],
      ['https://github.example/\x01', /control characters/],
      ['https://bücher.example/x', /plain ASCII.*punycode/],
      ['https://%67ithub.example/x', /percent-encoded/],
      ['https://github.example/x.git?ref=main', /query .* fragment/],
      ['https://github.example/x.git#main', /query .* fragment/],
      ['https://github.example./x.git', /must not end with a dot/],
      ['https://git_hub.example/x.git', /not a valid host name/],
      ['https://xn--zz.example/x.git', /read differently by URL parsers \(xn--zz is not a valid international label in punycode\)/],
      // Valid punycode of a label IDNA does not allow (a lone zero-width joiner).
      ['https://xn--1ug.example/x.git', /read differently by URL parsers/],
      ['https://git.xn--a.example/x.git', /read differently by URL parsers/],
      ['https://github.example:0/x', /port must be/],
      ['https://github.example:65536/x', /port must be/],
      ['https://github.example:/x', /port must be/],
      ['https://github.example/a<b', /path holds characters/],
      ['git://0x8c.0x52.0x79.0x3/x', /not a standard IPv4 address \(resolvers read it as 140\.82\.121\.3\)/],
      ['git://2354215171/x', /not a standard IPv4 address \(resolvers read it as 140\.82\.121\.3\)/],
      ['https://140.082.121.3/x', /not a standard IPv4 address/],
      ['https://[fe80::1%25eth0]/x', /IPv6 zone/],
      ['https://[1::2::3]/x', /not an IPv6 address/],
      ['https://[::ffff:140.82.121]/x', /not an IPv6 address/],
    ];
    for (const [url, msg] of cases) {
      await assert.rejects(checkSourceUrl(url, strict, counting), (err: Error & { status?: number }) => err.status === 400 && msg.test(err.message) && err.message.startsWith('source_url'), url);
    }
    assert.equal(resolved, 0, 'no name was looked up');
  });

  test('addresses embedding IPv4 are judged by it; answers that cannot be judged are refused', async () => {
    const anyPublic: ResolveHost = async () => ['140.82.121.3'];
    for (const url of ['https://[::ffff:140.82.121.3]/x', 'https://[2002:8c52:7903::1]/x']) assert.ok(await checkSourceUrl(url, strict, anyPublic), url);
    for (const url of ['https://[::ffff:a00:1]/x', 'https://[::ffff:10.0.0.1]/x', 'https://[2002:a00:1::1]/x', 'https://[::10.0.0.1]/x', 'https://[::ffff:0:a00:1]/x', 'https://[64:ff9b::8c52:7903]/x', 'https://[2001:0:4136:e378::1]/x']) {
      await assert.rejects(checkSourceUrl(url, strict, anyPublic), /public address/, url);
    }
    await assert.rejects(checkSourceUrl('https://scoped.example/x', strict, async () => ['fe80::1%eth0']), /cannot be checked/);
    await assert.rejects(checkSourceUrl('https://weird.example/x', strict, async () => ['0x7f.1']), /cannot be checked/);
  });

  test('refs: branches, tags and SHAs; nothing an option parser or git would misread', () => {
    for (const ref of ['main', 'release/1.2', 'v1.0.0', 'feature_x-y', 'a3f9c1e', '0123456789abcdef0123456789abcdef01234567']) {
      assert.equal(checkSourceRef(ref), ref);
    }
    for (const ref of ['', '-u', '--upload-pack=x', 'a..b', 'x/', 'x.lock', 'x/.hidden', '.x', 'a b', 'a;b', 'a~1', 'a^', 'a:b', 'x'.repeat(256), 'a//b']) {
      assert.throws(() => checkSourceRef(ref), /branch, a tag or a commit SHA/, JSON.stringify(ref));
    }
  });
});
