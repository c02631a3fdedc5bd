// The built bin/svc against a real svcd (started in-process on loopback).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { startServer, type TestServer } from '../../svcd/test/harness.js';
import { removeTenantWorkloads } from '../../svcd/test/images.js';
import { ensureNodeImage } from '../../svcd/test/operator-images.js';

const run = promisify(execFile);
const SVC = join(process.env.SVC_BIN_DIR ?? resolve(import.meta.dirname, '../../../bin'), 'svc');

describe('svc CLI', () => {
  let t: TestServer;
  const config = join(mkdtempSync(join(tmpdir(), 'svc-cli-')), 'config.json');
  const env = () => ({ PATH: process.env.PATH, SVC_CONFIG: config });
  const svc = (...args: string[]) => run(SVC, args, { env: env() });

  before(async () => {
    t = await startServer();
  });
  after(() => t.close());

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
    const config = join(mkdtempSync(join(tmpdir(), 'svc-cli-')), 'config.json');
    const svc = (...args: string[]) => run(SVC, args, { env: { PATH: process.env.PATH, SVC_CONFIG: config } });
    let tenantId = '';
    try {
      tenantId = (JSON.parse((await svc('--json', 'register', '--url', t.url, '--name', 'cli-kanban', '--email', 'ck@x.io')).stdout) as { tenant_id: string }).tenant_id;
      await assert.rejects(svc('kanban', 'show'), (e: { stderr?: string }) => /kanban board not found \(HTTP 404\)/.test(e.stderr ?? ''));
      const created = JSON.parse((await svc('--json', 'kanban', 'create')).stdout) as { status: string; url: string };
      assert.deepEqual([created.status, created.url], ['provisioning', '']);
      assert.match((await svc('kanban', 'show')).stdout, /^ID\s+STATUS\s+URL\s+HOST_PORT/);
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
