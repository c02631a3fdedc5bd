// The built bin/svc against a real svcd (started in-process on loopback).
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { ADMIN_TOKEN, databaseTestPlan, freePort, startServer, viaProxy, waitFor, type TestServer } from '../../svcd/test/harness.js';
import { EXAMPLE_BUSYBOX_IMAGE, ensureExampleImages } from '../../../examples/base-images.js';
import { BUSYBOX_IMAGE, ensureTestImages, removeImages, removeTenantWorkloads } from '../../svcd/test/images.js';
import { ensureDbImages, ensureNodeImage, ensureTemplateImages } from '../../svcd/test/operator-images.js';
import { startGitServer, type GitServer } from '../../svcd/test/git-fixtures.js';
import { tempDir } from './temp-dirs.js';

const run = promisify(execFile);
const SVC = join(process.env.SVC_BIN_DIR ?? resolve(import.meta.dirname, '../../../bin'), 'svc');

describe('svc CLI', () => {
  let t: TestServer;
  const config = join(tempDir('svc-cli-'), 'config.json');
  const env = () => ({ PATH: process.env.PATH, SVC_CONFIG: config });
  const svc = (...args: string[]) => run(SVC, args, { env: env() });

  before(async () => {
    t = await startServer({ config: { adminTokens: [ADMIN_TOKEN] } });
  });
  after(() => t.close());

  test("--version prints the CLI's version", async () => {
    const pkg = JSON.parse(readFileSync(resolve(import.meta.dirname, '../package.json'), 'utf8')) as { version: string };
    assert.equal((await svc('--version')).stdout, `${pkg.version}\n`);
    assert.equal((await svc('-V')).stdout, `${pkg.version}\n`);
  });

  test('register logs in, with the key saved in a 0600 config file', async () => {
    const r = await svc('--json', 'register', '--url', t.url, '--name', 'cli-tenant', '--email', 'cli@x.io');
    const out = JSON.parse(r.stdout) as { tenant_id: string; api_key: string };
    assert.match(out.api_key, /\./);
    assert.equal(statSync(config).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(readFileSync(config, 'utf8')), { url: t.url, apiKey: out.api_key });
    const me = JSON.parse((await svc('--json', 'tenant')).stdout) as { name: string };
    assert.equal(me.name, 'cli-tenant');
  });

  test('keys: create, list as a table, revoke', async () => {
    const created = JSON.parse((await svc('--json', 'keys', 'create', '--name', 'from-cli')).stdout) as { id: string };
    const table = (await svc('keys', 'list')).stdout;
    assert.match(table.split('\n')[0] ?? '', /^ID\s+NAME\s+PREFIX/);
    assert.ok(table.includes('from-cli'));
    await svc('keys', 'revoke', created.id);
    assert.ok(!(await svc('keys', 'list')).stdout.includes('from-cli'));
  });

  test("API errors print the API's message and exit non-zero; SVC_API_KEY overrides the file", async () => {
    await assert.rejects(run(SVC, ['tenant'], { env: { ...env(), SVC_API_KEY: '0000000000000000.bad' } }), (e: { code?: number; stderr?: string }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr ?? '', /svc: invalid API key \(HTTP 401\)/);
      return true;
    });
    await assert.rejects(svc('keys', 'create', '--expires-in', '0'), (e: { stderr?: string }) => /expires_in/.test(e.stderr ?? ''));
  });

  test('login checks the key, stores it 0600; SVC_URL overrides the file', async () => {
    const key = (JSON.parse(readFileSync(config, 'utf8')) as { apiKey: string }).apiKey;
    const other = join(tempDir('svc-cli-'), 'nested', 'config.json');
    const login = (...args: string[]) => run(SVC, ['login', ...args], { env: { PATH: process.env.PATH, SVC_CONFIG: other } });
    await assert.rejects(login('--url', t.url, '--key', '0000000000000000.bad'), /invalid API key \(HTTP 401\)/);
    const r = await login('--url', t.url, '--key', key);
    assert.match(r.stderr, /logged in as cli-tenant; saved to /);
    assert.equal(statSync(other).mode & 0o777, 0o600);
    const tenant = await run(SVC, ['--json', 'tenant'], { env: { PATH: process.env.PATH, SVC_CONFIG: other } });
    assert.equal((JSON.parse(tenant.stdout) as { name: string }).name, 'cli-tenant');
    await assert.rejects(run(SVC, ['tenant'], { env: { PATH: process.env.PATH, SVC_CONFIG: other, SVC_URL: 'http://127.0.0.1:1' } }), /svc: /);
  });

  test('tenant rename, usage metrics with its query checks, operator quotas', async () => {
    assert.equal((JSON.parse((await svc('--json', 'tenant', 'rename', 'cli-renamed')).stdout) as { name: string }).name, 'cli-renamed');
    assert.deepEqual(JSON.parse((await svc('--json', 'usage', 'metrics', '--period', 'hourly')).stdout), []);
    await assert.rejects(svc('usage', 'metrics', '--since', 'yesterday'), (e: { stderr?: string; code?: number }) => {
      assert.match(e.stderr ?? '', /since must be an RFC 3339 timestamp .* \(HTTP 400\)/);
      return e.code === 1;
    });
    await assert.rejects(svc('usage', 'metrics', '--period', 'weekly'), /Allowed choices are hourly, daily/);
    const tenantId = (JSON.parse((await svc('--json', 'tenant')).stdout) as { id: string }).id;
    await assert.rejects(svc('admin', 'quotas', tenantId, '--max-services', '7'), /HTTP 401|HTTP 403/);
    const q = await run(SVC, ['--json', 'admin', 'quotas', tenantId, '--max-services', '7'], { env: { ...env(), SVC_ADMIN_TOKEN: ADMIN_TOKEN } });
    assert.equal((JSON.parse(q.stdout) as { max_services: number }).max_services, 7);
    assert.equal((JSON.parse((await svc('--json', 'usage')).stdout) as { services: { max: number } }).services.max, 7);
    await assert.rejects(svc('keys', 'create', '--expires-in', 'soon'), /not a whole number/);
  });

  test('usage, activity and health', async () => {
    const usage = JSON.parse((await svc('--json', 'usage')).stdout) as { api_keys: { used: number } };
    assert.equal(usage.api_keys.used, 1);
    assert.ok((await svc('activity')).stdout.includes('key.revoked'));
    const health = JSON.parse((await svc('--json', 'health')).stdout) as { status: string };
    assert.ok(['ok', 'degraded'].includes(health.status));
  });
});

describe('svc kanban', () => {
  test('create, show, admin-token and delete the task board', async () => {
    await ensureNodeImage();
    // Real time: the board is provisioned in the background while the commands run.
    const t = await startServer({ realTime: true });
    const config = join(tempDir('svc-cli-'), 'config.json');
    const svc = (...args: string[]) => run(SVC, args, { env: { PATH: process.env.PATH, SVC_CONFIG: config } });
    let tenantId = '';
    try {
      tenantId = (JSON.parse((await svc('--json', 'register', '--url', t.url, '--name', 'cli-kanban', '--email', 'ck@x.io')).stdout) as { tenant_id: string }).tenant_id;
      await assert.rejects(svc('kanban', 'show'), (e: { stderr?: string }) => /kanban board not found \(HTTP 404\)/.test(e.stderr ?? ''));
      const created = JSON.parse((await svc('--json', 'kanban', 'create')).stdout) as { status: string; url: string };
      assert.deepEqual([created.status, created.url], ['provisioning', '']);
      assert.match((await svc('kanban', 'show')).stdout, /^id\s+\S+\nstatus\s+/, 'one object: a field per line');
      const token = JSON.parse((await svc('--json', 'kanban', 'admin-token')).stdout) as { admin_token: string };
      assert.ok(token.admin_token.length >= 40);
      const deleted = await svc('kanban', 'delete');
      assert.match(deleted.stderr, /task board deleted/);
      await assert.rejects(svc('kanban', 'show'), /HTTP 404/);
    } finally {
      await t.close();
      await removeTenantWorkloads([tenantId]);
    }
  });
});

/** bin/svc with its own config file, logged in as a fresh tenant of `t`. */
async function cliTenant(t: TestServer, name: string) {
  const config = join(tempDir('svc-cli-'), 'config.json');
  const env = { PATH: process.env.PATH, SVC_CONFIG: config };
  const svc = (...args: string[]) => run(SVC, args, { env, maxBuffer: 16 * 1024 * 1024 });
  const json = async <T>(...args: string[]) => JSON.parse((await svc('--json', ...args)).stdout) as T;
  /** svc with `input` on its stdin (execFile cannot give one). */
  const fed = (input: string, ...args: string[]) =>
    new Promise<{ stdout: string; code: number | null }>((resolve, reject) => {
      const child = spawn(SVC, args, { env, stdio: ['pipe', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ stdout, code }));
      child.stdin.end(input);
    });
  const { tenant_id } = await json<{ tenant_id: string }>('register', '--url', t.url, '--name', name, '--email', `${name}@x.io`);
  return { id: tenant_id, env, svc, json, fed };
}

describe('svc on the real engine: services, env, logs, snapshots, builds, databases, environments', () => {
  let t: TestServer;
  let git: GitServer;
  const tenants: string[] = [];
  before(async () => {
    await Promise.all([ensureTestImages(), ensureDbImages(), ensureTemplateImages(['default'])]);
    git = await startGitServer();
    t = await startServer({ realTime: true, overrides: { readyTimeoutMs: 10_000 } });
  });
  after(async () => {
    await t.close();
    await removeTenantWorkloads(tenants);
    for (const id of tenants) await removeImages(`svc/${id}/*`);
    await git.stop();
  });

  test('services: create --wait, list, logs and logs -f, env set/list/unset, stop/start, deployments, metrics, snapshots, delete', async () => {
    const c = await cliTenant(t, 'cli-services');
    tenants.push(c.id);
    const created = await c.svc('--json', 'services', 'create', 'web', '--image', BUSYBOX_IMAGE, '--env', 'GREETING=hi', '--wait');
    const s = JSON.parse(created.stdout) as { id: string; status: string };
    assert.equal(s.status, 'running');
    assert.match(created.stderr, /deploy: deploying\ndeploy: running/, 'progress on stderr');
    assert.match((await c.svc('services', 'list')).stdout, new RegExp(`^ID\\s+NAME[\\s\\S]*${s.id}\\s+web`));
    assert.match((await c.svc('logs', s.id, '--tail', '50')).stdout, /svc-test starting on port 8000/);

    // -f keeps the stream open: the first lines arrive, then the command is stopped by hand.
    const follow = spawn(SVC, ['logs', '-f', s.id], { env: c.env });
    const firstLines = await new Promise<string>((resolve, reject) => {
      let seen = '';
      follow.stdout.on('data', (d: Buffer) => {
        seen += d.toString();
        if (seen.includes('svc-test starting')) resolve(seen);
      });
      follow.on('exit', (code) => reject(new Error(`logs -f exited early (${code}): ${seen}`)));
    });
    assert.match(firstLines, /svc-test starting/);
    assert.equal(follow.exitCode, null, 'still following');
    follow.kill('SIGINT');

    await c.svc('env', 'set', s.id, 'A=1', 'B=two=2');
    await assert.rejects(c.svc('env', 'set', s.id, 'novalue'), (e: { code?: number; stderr?: string }) => e.code === 2 && /expected KEY=VALUE/.test(e.stderr ?? ''));
    assert.deepEqual(await c.json('env', 'list', s.id, '--reveal'), { A: '1', B: 'two=2', GREETING: 'hi' });
    await c.svc('env', 'unset', s.id, 'A', 'GREETING');
    assert.match((await c.svc('env', 'list', s.id)).stdout, /^KEY\s+VALUE\nB\s+/);

    assert.equal((await c.json<{ service: { status: string } }>('services', 'stop', s.id)).service.status, 'stopped');
    assert.equal((await c.json<{ status: string }>('services', 'start', s.id, '--wait')).status, 'running');
    assert.ok((await c.json<unknown[]>('services', 'deployments', s.id)).length >= 2);
    assert.ok(Array.isArray(await c.json('services', 'metrics', s.id, '--period', 'hourly')));

    const snap = await c.json<{ id: string }>('snapshots', 'create', s.id, '--name', 'v1');
    assert.match((await c.svc('snapshots', 'list')).stdout, /v1/);
    const copy = await c.json<{ id: string; status: string; image: string }>('services', 'create', 'copy', '--from-snapshot', snap.id, '--wait');
    assert.deepEqual([copy.status, copy.image], ['running', BUSYBOX_IMAGE]);
    await c.svc('snapshots', 'delete', snap.id);

    // Custom domains, by service name: add prints the TXT record to create.
    const added = await c.svc('--json', 'domains', 'add', 'copy', 'Shop.Example.COM');
    const domain = JSON.parse(added.stdout) as { id: string; hostname: string; status: string; verification: { name: string; value: string } };
    assert.deepEqual([domain.hostname, domain.status], ['shop.example.com', 'pending_verification']);
    assert.ok(added.stderr.includes(`create the TXT record _svc-challenge.shop.example.com with the value ${domain.verification.value};`), added.stderr);
    assert.match((await c.svc('domains', 'list', copy.id)).stdout, /shop\.example\.com\s+pending_verification/);
    await assert.rejects(c.svc('domains', 'add', 'copy', '*.example.com'), /wildcard names are not offered.*\(HTTP 400\)/);
    assert.match((await c.svc('domains', 'delete', 'copy', domain.id)).stderr, /removed/);
    assert.deepEqual(await c.json('domains', 'list', 'copy'), []);
    const deleted = await c.svc('services', 'delete', copy.id);
    assert.match(deleted.stderr, /deleted/);
    await assert.rejects(c.svc('services', 'show', copy.id), /service not found \(HTTP 404\)/);
  });

  test('a failed deploy with --wait exits non-zero with its last_error', async () => {
    const c = await cliTenant(t, 'cli-failing');
    tenants.push(c.id);
    await assert.rejects(c.svc('services', 'create', 'nope', '--image', '127.0.0.1:1/none:1', '--wait'), (e: { code?: number; stderr?: string }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr ?? '', /svc: deploy failed: /);
      return true;
    });
  });

  test('builds: create --wait streams the log and deploys; list, show, logs', async () => {
    const c = await cliTenant(t, 'cli-builds');
    tenants.push(c.id);
    const s = await c.json<{ id: string }>('services', 'create', 'built', '--image', BUSYBOX_IMAGE);
    const r = await c.svc('--json', 'builds', 'create', s.id, '--git-url', git.url('app'), '--wait');
    const b = JSON.parse(r.stdout) as { id: string; status: string; deployment_id: string | null };
    assert.equal(b.status, 'succeeded');
    assert.ok(b.deployment_id);
    assert.match(r.stderr, /build [0-9a-f]+ queued/);
    assert.match(r.stderr, /Step|FROM|#\d/i, "the engine's build output, streamed");
    assert.match(r.stderr, /build: succeeded/);
    assert.equal((await c.json<Array<{ id: string }>>('builds', 'list', s.id))[0]?.id, b.id);
    assert.equal((await c.json<Array<{ id: string }>>('builds', 'list'))[0]?.id, b.id);
    assert.equal((await c.json<{ status: string }>('builds', 'show', s.id, b.id)).status, 'succeeded');
    assert.ok((await c.svc('builds', 'logs', s.id, b.id)).stdout.length > 0);
    assert.ok((await c.svc('builds', 'logs', '-f', s.id, b.id)).stdout.length > 0, 'a finished build: -f prints the log and ends');
    await assert.rejects(c.svc('builds', 'create', s.id, '--git-url', git.url('broken'), '--wait'), /svc: build failed/);
  });

  test('databases: create --wait, list, url, delete', async () => {
    const c = await cliTenant(t, 'cli-databases');
    tenants.push(c.id);
    await databaseTestPlan(t, c.id);
    const r = await c.svc('--json', 'db', 'create', 'orders', '--type', 'postgres', '--wait');
    const d = JSON.parse(r.stdout) as { id: string; status: string };
    assert.equal(d.status, 'running');
    assert.match(r.stderr, /database orders: provisioning\ndatabase orders: running/);
    assert.match((await c.svc('db', 'list')).stdout, /orders\s+postgres\s+running/);
    assert.match((await c.svc('db', 'url', d.id)).stdout, /^postgres:\/\/[^:]+:[^@]+@127\.0\.0\.1:\d+\/\w+\n$/);
    assert.match((await c.svc('db', 'url', d.id, '--internal')).stdout, /@orders:5432\//);
    await assert.rejects(c.svc('db', 'create', 'x', '--type', 'mysql'), /Allowed choices are postgres, redis/);
    await c.svc('db', 'delete', d.id);
    assert.equal((await c.json<unknown[]>('db', 'list')).length, 0);
  });

  test('environments: create, exec prints both streams and exits with the remote code, delete', async () => {
    const c = await cliTenant(t, 'cli-envs');
    tenants.push(c.id);
    assert.ok((await c.json<unknown[]>('environments', 'templates')).length >= 4);
    const e = await c.json<{ id: string; status: string }>('environments', 'create', 'dev', '--template', 'default');
    assert.equal(e.status, 'running');
    const ok = await c.svc('env', 'exec', e.id, '--', 'sh', '-c', 'echo out; echo err >&2');
    assert.deepEqual([ok.stdout, ok.stderr], ['out\n', 'err\n']);
    await assert.rejects(c.svc('env', 'exec', e.id, '--', 'sh', '-c', 'echo partial; exit 7'), (err: { code?: number; stdout?: string }) => {
      assert.equal(err.code, 7, 'the remote exit code');
      assert.equal(err.stdout, 'partial\n');
      return true;
    });
    const asJson = await c.json<{ exit_code: number; stdout: string }>('env', 'exec', e.id, '--workdir', '/tmp', '--', 'pwd');
    assert.deepEqual([asJson.exit_code, asJson.stdout], [0, '/tmp\n']);
    // Variables and this terminal's stdin.
    const fed = await c.fed('piped in\n', 'env', 'exec', e.id, '-e', 'GREETING=hi', '-i', '--', 'sh', '-c', 'echo "$GREETING"; cat');
    assert.deepEqual([fed.code, fed.stdout], [0, 'hi\npiped in\n']);

    // ^C goes to the command as SIGINT (its trap runs, its exit code is svc's); svc stays to the end.
    const interrupted = await new Promise<{ stdout: string; stderr: string; code: number | null }>((resolve, reject) => {
      const child = spawn(SVC, ['env', 'exec', e.id, '--', 'sh', '-c', `trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 0.1; done`], { env: c.env });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
        if (stdout === 'ready\n') child.kill('SIGINT');
      });
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ stdout, stderr, code }));
    });
    assert.deepEqual([interrupted.code, interrupted.stdout], [5, 'ready\ngot-int\n'], interrupted.stderr);
    assert.match(interrupted.stderr, /sent SIGINT to the command/);

    // A terminal: piped input goes to the shell as typed, its exit code is svc's.
    const shell = await c.fed('echo in-the-shell-$((6*7)); exit 9\n', 'env', 'shell', e.id);
    assert.equal(shell.code, 9);
    assert.match(shell.stdout, /in-the-shell-42/);

    // Files both ways, a listing and a removal.
    const dir = tempDir('svc-cli-cp-');
    writeFileSync(join(dir, 'local.txt'), 'from the laptop\n', { mode: 0o640 });
    await c.svc('env', 'cp', join(dir, 'local.txt'), `${e.id}:notes/remote.txt`);
    assert.equal((await c.svc('env', 'exec', e.id, '--', 'cat', '/workspace/notes/remote.txt')).stdout, 'from the laptop\n');
    const listed = await c.json<{ entries: Array<{ name: string; mode: string; size: number }> }>('env', 'ls', e.id, '/workspace/notes');
    assert.deepEqual(listed.entries.map((f) => [f.name, f.mode, f.size]), [['remote.txt', '0640', 16]], 'the local mode goes with it');
    await c.svc('env', 'cp', `${e.id}:/workspace/notes/remote.txt`, dir);
    assert.equal(readFileSync(join(dir, 'remote.txt'), 'utf8'), 'from the laptop\n');
    assert.match((await c.svc('env', 'ls', e.id, 'notes')).stdout, /remote\.txt\s+file\s+16/);
    await c.svc('env', 'rm', e.id, '-r', 'notes');
    await assert.rejects(c.svc('env', 'ls', e.id, 'notes'), (err: { stderr?: string }) => /not found \(HTTP 404\)/.test(err.stderr ?? ''));
    await assert.rejects(c.svc('env', 'cp', join(dir, 'local.txt'), join(dir, 'other.txt')), (err: { stderr?: string }) => /one side of a copy is ENV:path/.test(err.stderr ?? ''));
    assert.match((await c.svc('environments', 'list')).stdout, /dev\s+default/);
    await c.svc('environments', 'delete', e.id);
  });
});

describe('svc deploy: a directory to a URL', () => {
  let t: TestServer;
  let proxyPort: number;
  const tenants: string[] = [];
  const EXAMPLES = resolve(import.meta.dirname, '../../../examples');
  before(async () => {
    await ensureExampleImages();
    proxyPort = await freePort();
    t = await startServer({ realTime: true, config: { proxyListen: `127.0.0.1:${proxyPort}` }, overrides: { readyTimeoutMs: 10_000 } });
  });
  after(async () => {
    await t.close();
    await removeTenantWorkloads(tenants);
    for (const id of tenants) await removeImages(`svc/${id}/*`);
  });

  /** What the URL svc deploy printed answers through the proxy. */
  const fetched = async (url: string) => {
    const u = new URL(url);
    return viaProxy(proxyPort, u.host, '/');
  };

  test('each example deploys from its directory: the service is created, built, and its URL answers 200', async () => {
    const c = await cliTenant(t, 'cli-deploy');
    tenants.push(c.id);
    const hello = await c.svc('deploy', join(EXAMPLES, 'hello'));
    assert.match(hello.stderr, /created service hello \([0-9a-f]+\)/);
    assert.match(hello.stderr, /packed 3 files, .* without what \.dockerignore leaves out/, "Dockerfile, .dockerignore (sent, as Docker does) and public/index.html");
    assert.match(hello.stderr, /==> unpacking the uploaded archive:sha256:/);
    assert.match(hello.stderr, /build: succeeded/);
    const helloUrl = hello.stdout.trim();
    assert.match(helloUrl, /^http:\/\/[0-9a-z-]+\.localhost:\d+$/, "the URL, alone on stdout");
    const page = await fetched(helloUrl);
    assert.equal(page.status, 200);
    assert.match(page.body, /Hello from svc/);

    const node = await c.svc('deploy', join(EXAMPLES, 'node-hello'));
    const answer = await fetched(node.stdout.trim());
    assert.equal(answer.status, 200, answer.body);
    assert.equal((JSON.parse(answer.body) as { hello: string }).hello, 'from svc');
    assert.match((JSON.parse(answer.body) as { node: string }).node, /^v24\./);

    // Again: the service exists, so it is built and deployed anew under the same URL; --json gives the service.
    const again = await c.json<{ name: string; status: string; url: string }>('deploy', join(EXAMPLES, 'hello'));
    assert.deepEqual([again.name, again.status, again.url], ['hello', 'running', helloUrl]);
    const services = await c.json<Array<{ name: string }>>('services', 'list');
    assert.deepEqual(services.map((s) => s.name).sort(), ['hello', 'node-hello']);
    // For people: a few columns, the URL among them; --wide every field.
    const list = (await c.svc('services', 'list')).stdout.split('\n');
    assert.match(list[0]!, /^ID\s+NAME\s+STATUS\s+URL\s+AGE$/);
    assert.ok(list.some((l) => l.includes(helloUrl) && /\brunning\b/.test(l) && /just now|\d+ (s|min)$/.test(l)), list.join('\n'));
    assert.ok(!list.join('\n').includes('\u001b['), 'no colours on a pipe');
    assert.match((await c.svc('--wide', 'services', 'list')).stdout.split('\n')[0]!, /^ID\s+NAME\s+IMAGE\s+PORT\s+STATUS\s+URL\s+DNS_LABEL/);

    // svc open hands the URL to $BROWSER (its first entry, with its arguments), the service by
    // name, and does not wait for the browser to exit (this one stays 30 s).
    const opened = join(tempDir('svc-open-'), 'opened');
    const browser = join(tempDir('svc-browser-'), 'browser');
    writeFileSync(browser, `#!/bin/sh\necho "$@" > ${opened}\nsleep 30\n`, { mode: 0o755 });
    const t0 = Date.now();
    await run(SVC, ['open', 'hello'], { env: { ...c.env, BROWSER: `${browser} --new-window:/usr/bin/false` } });
    assert.ok(Date.now() - t0 < 10_000, 'svc open returned while the browser runs');
    await waitFor('the browser to get the URL', async () => (existsSync(opened) && readFileSync(opened, 'utf8') !== '' ? true : undefined), 10_000);
    assert.equal(readFileSync(opened, 'utf8'), `--new-window ${helloUrl}\n`);
    await assert.rejects(run(SVC, ['open', 'nope'], { env: { ...c.env, BROWSER: browser } }), (e: { stderr?: string }) => /no service named or with id "nope"/.test(e.stderr ?? ''));
  });

  test('a directory svc cannot build fails with the reason and a non-zero exit', async () => {
    const c = await cliTenant(t, 'cli-deploy-bad');
    tenants.push(c.id);
    const dir = tempDir('svc-deploy-');
    await assert.rejects(c.svc('deploy', dir), (e: { code?: number; stderr?: string }) => e.code === 2 && /no Dockerfile in /.test(e.stderr ?? ''));
    writeFileSync(join(dir, 'Dockerfile'), `FROM ${EXAMPLE_BUSYBOX_IMAGE}\nRUN echo about to fail && exit 3\n`);
    await assert.rejects(c.svc('deploy', dir, '--name', 'broken'), (e: { code?: number; stderr?: string }) => {
      assert.equal(e.code, 1);
      assert.match(e.stderr ?? '', /about to fail/, "the build's log, streamed");
      assert.match(e.stderr ?? '', /svc: build failed: /);
      return true;
    });
    symlinkSync('/etc/passwd', join(dir, 'passwd'));
    await assert.rejects(c.svc('deploy', dir, '--name', 'refused-link'), (e: { code?: number; stderr?: string }) => e.code === 1 && /passwd is a symlink to \/etc\/passwd, outside the directory/.test(e.stderr ?? ''));
    assert.ok(!(await c.json<Array<{ name: string }>>('services', 'list')).some((s) => s.name === 'refused-link'), 'a directory that cannot be sent leaves no service behind');
    // Left out by the ignore file, the link is no problem (and with no .dockerignore, .gitignore counts).
    writeFileSync(join(dir, '.gitignore'), 'passwd\n');
    writeFileSync(join(dir, 'Dockerfile'), `FROM ${EXAMPLE_BUSYBOX_IMAGE}\nCOPY . /www\nCMD ["httpd", "-f", "-p", "8000", "-h", "/www"]\n`);
    const ok = await c.svc('deploy', dir, '--name', 'broken', '--no-wait');
    assert.match(ok.stderr, /packed 2 files, .* without what \.gitignore leaves out/);
    assert.match(ok.stderr, /deploying into service broken \([0-9a-f]+, waiting for its first build, port 8000\)/);

    // As the Docker CLI: the Dockerfile goes even when .dockerignore leaves everything out.
    const minimal = tempDir('svc-deploy-');
    writeFileSync(join(minimal, 'Dockerfile'), `FROM ${EXAMPLE_BUSYBOX_IMAGE}\nCMD ["httpd", "-f", "-p", "8000", "-h", "/"]\n`);
    writeFileSync(join(minimal, '.dockerignore'), '*\n');
    writeFileSync(join(minimal, 'secret.txt'), 'left out\n');
    const sent = await c.svc('deploy', minimal, '--name', 'minimal');
    assert.match(sent.stderr, /packed 2 files/, 'the Dockerfile and .dockerignore, not secret.txt');
    assert.match(sent.stderr, /build: succeeded/);

    // Into a service that ran an image: said, with its port.
    const fromImage = await c.json<{ id: string }>('services', 'create', 'was-image', '--image', EXAMPLE_BUSYBOX_IMAGE, '--port', '8000');
    const into = await c.svc('deploy', minimal, '--name', 'was-image', '--no-wait');
    assert.match(into.stderr, new RegExp(`deploying into service was-image \\(${fromImage.id}, image ${EXAMPLE_BUSYBOX_IMAGE.replace(/[.]/g, '\\.')}, port 8000\\)`));
  });
});
