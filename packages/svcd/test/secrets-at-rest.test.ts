// Secrets at rest (issue 17, item 6): no secret the API hands out or takes in is ever written
// unsealed to the store or to svcd's log. A real svcd on each store, its log captured at trace
// level, goes through every secret-bearing route with and without an Idempotency-Key; then every
// byte under the data dir (SQLite file, WAL, shm: raw, not through SQLite), a pg_dump of the
// PostgreSQL database and the log are searched for each secret in several encodings. Markers that
// are not secrets (a tenant name, a service name, an env key, an Idempotency-Key) must be found by
// the same search, so a search that sees nothing cannot pass.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import { SvcClient } from '@svc/client';
import { ADMIN_TOKEN, BOOTSTRAP_TOKEN, databaseTestPlan, eachStore, limitedRaw, registerRaw, startServer, storeLocation, waitFor, type StoreKind, type TestServer } from './harness.js';
import { removeTenantWorkloads } from './images.js';
import { ensureDbImages, ensureNodeImage } from './operator-images.js';
import { createLogger } from '../src/observability/logger.js';
import { Sealer, UnsealError, type SealedText } from '../src/secrets/sealer.js';
import { openStore } from '../src/store/index.js';
import { sealedIdempotentResponses } from '../src/store/migrations/0011_sealed_idempotent_responses.js';

/** A value to look for, and what it is (for the failure message). */
interface Needle {
  what: string;
  value: string;
}

/** The byte forms a value could be stored or logged in: as is, base64, base64url and hex of its text. */
function encodings(n: Needle): { what: string; bytes: Buffer }[] {
  const text = Buffer.from(n.value, 'utf8');
  const forms = [
    { what: `${n.what} (raw)`, bytes: text },
    { what: `${n.what} (base64)`, bytes: Buffer.from(text.toString('base64'), 'utf8') },
    { what: `${n.what} (base64url)`, bytes: Buffer.from(text.toString('base64url'), 'utf8') },
    { what: `${n.what} (hex)`, bytes: Buffer.from(text.toString('hex'), 'utf8') },
  ];
  return forms;
}

/** Every form of every needle found in `haystack`. */
function findAll(haystack: Buffer, needles: Needle[]): string[] {
  return needles.flatMap((n) => encodings(n).filter((f) => haystack.includes(f.bytes)).map((f) => f.what));
}

/** Every file under `dir`, concatenated raw (the SQLite file, its WAL and shm, anything else svcd wrote). */
function dataDirBytes(dir: string): { files: string[]; bytes: Buffer } {
  const files: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else files.push(p);
    }
  };
  walk(dir);
  return { files, bytes: Buffer.concat(files.map((f) => readFileSync(f))) };
}

/** Everything in the PostgreSQL database as pg_dump writes it (schema and every row of every table). */
function pgDump(databaseUrl: string): Buffer {
  return execFileSync('pg_dump', ['--no-owner', '--no-privileges', databaseUrl], { maxBuffer: 256 * 1024 * 1024 });
}

/** What the store holds, read around SQLite and the PostgreSQL client library alike. */
function storeBytes(t: TestServer, kind: StoreKind): Buffer {
  const files = dataDirBytes(t.deps.config.dataDir);
  if (kind === 'sqlite') {
    assert.ok(files.files.some((f) => f.endsWith('svc.db')), 'the scan reads the SQLite file');
    return files.bytes;
  }
  // The data dir too: a PostgreSQL svcd still writes master.key and instance-id there.
  return Buffer.concat([files.bytes, pgDump(t.deps.config.databaseUrl!)]);
}

/** A log destination whose lines the test reads (svcd's own logger options, every level). */
function logSink(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer | string, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => chunks.join('') };
}

const word = (prefix: string) => `${prefix}${randomBytes(8).toString('hex')}`;

describe('the search itself', () => {
  test('finds a value in each encoding, and nothing that is not there', () => {
    const n: Needle = { what: 'x', value: 'Zm9vYmFy-secret-0123456789abcdef' };
    for (const f of encodings(n)) assert.deepEqual(findAll(Buffer.concat([randomBytes(40), f.bytes, randomBytes(40)]), [n]).includes(f.what), true, f.what);
    assert.deepEqual(findAll(randomBytes(4096), [n]), []);
  });

  test('a value sealed with a context opens only with that context', () => {
    const sealer = new Sealer(randomBytes(32));
    const sealed = sealer.seal('the answer', 'row a');
    assert.equal(sealer.open(sealed, 'row a'), 'the answer');
    assert.throws(() => sealer.open(sealed, 'row b'), UnsealError);
    assert.throws(() => sealer.open(sealed), UnsealError);
    assert.throws(() => sealer.open('{"api_key":"plain"}', 'row a'), UnsealError);
    assert.equal(sealer.open(sealer.seal('no context')), 'no context', 'values sealed without a context (env, passwords) still open');
  });
});

eachStore((kind) => {
  describe(`secrets at rest (${kind})`, () => {
    test('keys, env values, recovered keys and operator tokens never reach the store or the log in plain text', async () => {
      const log = logSink();
      const t = await startServer({
        store: kind,
        config: { bootstrapTokens: [BOOTSTRAP_TOKEN], adminTokens: [ADMIN_TOKEN], openRegistration: false },
        overrides: { log: createLogger('trace', log.stream) },
      });
      const secrets: Needle[] = [
        { what: 'bootstrap token', value: BOOTSTRAP_TOKEN },
        { what: 'admin token', value: ADMIN_TOKEN },
      ];
      /** An API key, and its secret part alone (the part that must never be stored). */
      const keepKey = (what: string, apiKey: string): void => {
        secrets.push({ what, value: apiKey }, { what: `${what}, secret part`, value: apiKey.slice(apiKey.indexOf('.') + 1) });
      };
      const tenantName = word('marker-tenant-');
      const serviceName = word('marker-service-');
      const envKey = word('MARKER_KEY_').toUpperCase();
      const idemKey = word('marker-idem-');
      let tenantId = '';
      try {
        // Register: the first key (bootstrap token in its header).
        const reg = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: tenantName, email: `${tenantName}@example.com` }, { 'x-bootstrap-token': BOOTSTRAP_TOKEN });
        assert.equal(reg.status, 201, reg.text);
        tenantId = reg.body.tenant_id;
        keepKey('registered key', reg.body.api_key);
        const c = t.client.withKey(reg.body.api_key);

        // POST /v1/auth/keys without and with an Idempotency-Key; the replay must give the same key back.
        const plainKey = await c.raw<{ api_key: string }>('POST', '/v1/auth/keys', { body: { name: 'no-idempotency' } });
        assert.equal(plainKey.status, 201);
        keepKey('created key', plainKey.body.api_key);
        const idem = { 'idempotency-key': idemKey };
        const first = await c.raw<{ api_key: string }>('POST', '/v1/auth/keys', { body: { name: 'idempotent' }, headers: idem });
        assert.equal(first.status, 201);
        keepKey('idempotent key', first.body.api_key);
        const replay = await c.raw<{ api_key: string }>('POST', '/v1/auth/keys', { body: { name: 'idempotent' }, headers: idem });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.text, first.text, 'the sealed answer opens to the very bytes first sent');

        // A service with env values at creation (idempotent), then env set with and without a key.
        // The image is on a loopback registry nobody serves, so the deploy fails at once; the env
        // values are stored all the same.
        const createValue = word('createvalue');
        secrets.push({ what: 'env value given at service creation', value: createValue });
        const svc = await c.raw<{ id: string }>('POST', '/v1/services', {
          body: { name: serviceName, image: '127.0.0.1:1/none:1', env: { [envKey]: createValue } },
          headers: { 'idempotency-key': word('svc-') },
        });
        assert.equal(svc.status, 201, svc.text);
        const sid = svc.body.id;
        const setIdem = word('setenvvalue');
        const setPlain = word('setenvvalue');
        secrets.push({ what: 'env value set with an Idempotency-Key', value: setIdem }, { what: 'env value set without one', value: setPlain });
        assert.equal((await c.raw('POST', `/v1/services/${sid}/env`, { body: { IDEM_VAR: setIdem }, headers: { 'idempotency-key': word('env-') } })).status, 200);
        assert.equal((await c.raw('POST', `/v1/services/${sid}/env`, { body: { PLAIN_VAR: setPlain } })).status, 200);
        // A malformed body: the 400 quotes it (V8's JSON.parse message shows the 10 characters from
        // the bad token on; 10 characters, so that the whole value is quoted). The answer goes back
        // to its sender only: not to the log, and (parsing fails before the idempotency claim) not
        // to the store.
        const echoed = `q${randomBytes(5).toString('hex').slice(0, 9)}`;
        secrets.push({ what: 'env value quoted by a 400', value: echoed });
        const bad = await c.raw<{ error: string }>('POST', `/v1/services/${sid}/env`, { rawBody: `{"ECHO_VAR": ${echoed}}`, headers: { 'idempotency-key': word('bad-') } });
        assert.equal(bad.status, 400);
        assert.ok(bad.body.error.includes(echoed), `the 400 quotes the value: ${bad.body.error}`);
        const revealed = await c.raw<Record<string, string>>('GET', `/v1/services/${sid}/env`, { query: { reveal: true } });
        assert.equal(revealed.status, 200);
        assert.deepEqual(revealed.body, { [envKey]: createValue, IDEM_VAR: setIdem, PLAIN_VAR: setPlain });
        // A snapshot keeps the env too (sealed as one JSON object).
        assert.equal((await c.raw('POST', `/v1/services/${sid}/snapshots`, { body: { name: 'with-env' }, headers: { 'idempotency-key': word('snap-') } })).status, 201);

        // The operator's recovery: a new key, the admin token in its header.
        const recovered = await limitedRaw<{ api_key: string }>(t, 'POST', '/v1/auth/recover', { body: { email: `${tenantName}@example.com` }, headers: { 'x-admin-token': ADMIN_TOKEN } });
        assert.equal(recovered.status, 200, recovered.text);
        keepKey('recovered key', recovered.body.api_key);

        // The background deploy has ended (its failure is stored and logged) before anything is read.
        await waitFor('the deploy to fail', async () => (await c.service(sid)).status === 'failed');

        const stored = storeBytes(t, kind);
        assert.deepEqual(findAll(stored, secrets), [], 'no secret in the store');
        const logged = Buffer.from(log.text(), 'utf8');
        assert.deepEqual(findAll(logged, secrets), [], 'no secret in the log');

        // Positive controls: the same searches see what is meant to be there.
        const storedMarkers: Needle[] = [
          { what: 'tenant name', value: tenantName },
          { what: 'service name', value: serviceName },
          { what: 'env key', value: envKey },
          { what: 'Idempotency-Key (stored with its sealed answer)', value: idemKey },
        ];
        for (const m of storedMarkers) assert.ok(findAll(stored, [m]).includes(`${m.what} (raw)`), `the store scan finds the ${m.what}`);
        const loggedMarkers: Needle[] = [
          { what: 'revealing URL', value: `/v1/services/${sid}/env?reveal=true` },
          { what: 'audit line of the reveal', value: 'service env revealed' },
          { what: 'audit line of the recovery', value: 'operator recovered a tenant key' },
          { what: 'failed deploy', value: 'could not be pulled' },
        ];
        for (const m of loggedMarkers) assert.ok(findAll(logged, [m]).includes(`${m.what} (raw)`), `the log scan finds the ${m.what}`);
      } finally {
        await t.close();
        if (tenantId) await removeTenantWorkloads([tenantId]).catch(() => {});
      }
    });

    test('a stored answer copied into another tenant\'s row does not replay there, and the request does not run again', async () => {
      const t = await startServer({ store: kind });
      try {
        const a = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: word('copy-a-'), email: `${word('a')}@example.com` });
        const b = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: word('copy-b-'), email: `${word('b')}@example.com` });
        // Clients without the OpenAPI check: the 500 this test provokes is not a documented answer.
        const ca = new SvcClient({ baseUrl: t.url, apiKey: a.body.api_key });
        const cb = new SvcClient({ baseUrl: t.url, apiKey: b.body.api_key });
        const h = { 'idempotency-key': 'same-key' };
        assert.equal((await ca.raw('POST', '/v1/auth/keys', { body: { name: 'k' }, headers: h })).status, 201);
        assert.equal((await cb.raw('POST', '/v1/auth/keys', { body: { name: 'k' }, headers: h })).status, 201);
        // A's row, as the store holds it, written into B's row (what someone with write access to the store could do).
        const now = Math.floor(t.clock.now() / 1000);
        const claim = { key: 'same-key', method: 'POST', path: '/v1/auth/keys', bodyHash: '', now, expiresAt: now + 600 };
        const rowA = await t.deps.store.idempotency.claim({ ...claim, tenantId: a.body.tenant_id });
        assert.match(rowA?.response_body ?? '', /^v1\./, 'stored sealed');
        await t.deps.store.idempotency.complete(b.body.tenant_id, 'same-key', 201, rowA!.content_type, rowA!.response_body as SealedText);
        const keysBefore = (await cb.listKeys()).length;
        const replay = await cb.raw<{ error: string }>('POST', '/v1/auth/keys', { body: { name: 'k' }, headers: h });
        assert.equal(replay.status, 500);
        assert.equal(replay.body.error, 'internal server error');
        assert.equal((await cb.listKeys()).length, keysBefore, 'not run again');
      } finally {
        await t.close();
      }
    });

    test('migration 0011 deletes answers stored in plain text and keeps pending claims', async () => {
      const loc = await storeLocation(kind);
      try {
        await (await openStore({ databaseUrl: loc.databaseUrl, dataDir: loc.dataDir })).close();
        const plainSecret = word('plainsecret');
        const db =
          kind === 'sqlite'
            ? new Kysely<unknown>({ dialect: new SqliteDialect({ database: new BetterSqlite3(join(loc.dataDir, 'svc.db')) }) })
            : new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: loc.databaseUrl!, max: 1 }) }) });
        try {
          const row = (key: string, state: string, body: string | null) =>
            sql`INSERT INTO idempotency_keys (tenant_id, key, method, path, body_hash, state, status_code, content_type, response_body, created_at, expires_at)
                VALUES ('t1', ${key}, 'POST', '/v1/auth/keys', 'h', ${state}, ${body === null ? null : 201}, 'application/json', ${body}, 1, 601)`.execute(db);
          await row('old-done', 'done', JSON.stringify({ api_key: `0123456789abcdef.${plainSecret}` }));
          await row('old-pending', 'pending', null);
          const secret: Needle[] = [{ what: 'plain stored key', value: plainSecret }];
          if (kind === 'sqlite') assert.notDeepEqual(findAll(dataDirBytes(loc.dataDir).bytes, secret), [], 'control: the plain answer is on disk before');

          await sealedIdempotentResponses(kind).up(db);

          const left = await sql<{ key: string }>`SELECT key FROM idempotency_keys ORDER BY key`.execute(db);
          assert.deepEqual(left.rows.map((r) => r.key), ['old-pending']);
          if (kind === 'sqlite') assert.deepEqual(findAll(dataDirBytes(loc.dataDir).bytes, secret), [], 'no byte of it left in the file or its WAL');
          else assert.deepEqual(findAll(pgDump(loc.databaseUrl!), secret), []);
        } finally {
          await db.destroy();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });
});

// The engine part: a managed PostgreSQL database and the task board, on stand-in images
// (test/operator-images.ts, built once per machine). Their password and admin token are made by
// svcd and revealed through GETs; they must be in the store sealed only, and nowhere in the log.
eachStore((kind) => {
  describe(`secrets at rest, databases and the task board (${kind}, Docker Engine)`, () => {
    test('database passwords and the board admin token never reach the store or the log in plain text', async () => {
      await ensureDbImages();
      await ensureNodeImage();
      const log = logSink();
      const t = await startServer({
        store: kind,
        realTime: true,
        overrides: { log: createLogger('trace', log.stream), databaseReadyTimeoutMs: 120_000, kanbanReadyTimeoutMs: 120_000 },
      });
      const dbName = word('markerdb').slice(0, 20);
      let tenantId = '';
      try {
        const reg = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: word('engine-'), email: `${word('engine')}@example.com` });
        assert.equal(reg.status, 201, reg.text);
        tenantId = reg.body.tenant_id;
        await databaseTestPlan(t, tenantId);
        const c = t.client.withKey(reg.body.api_key);
        const created = await c.raw<{ id: string }>('POST', '/v1/databases', { body: { name: dbName, type: 'postgres' }, headers: { 'idempotency-key': word('db-') } });
        assert.equal(created.status, 201, created.text);
        const board = await c.raw('POST', '/v1/kanban', { headers: { 'idempotency-key': word('kanban-') } });
        assert.equal(board.status, 202, board.text);
        const db = await waitFor('the database to leave provisioning', async () => {
          const now = await c.database(created.body.id);
          return now.status === 'provisioning' ? undefined : now;
        }, 180_000);
        assert.equal(db.status, 'running', db.last_error ?? '');
        await waitFor('the board to run', async () => ((await c.kanban()).url !== '' ? true : undefined), 180_000);

        const conn = await c.connectionString(created.body.id);
        const { admin_token: adminToken } = await c.kanbanAdminToken();
        const secrets: Needle[] = [
          { what: 'database password', value: conn.password },
          { what: 'connection string', value: conn.connection_string },
          { what: 'internal connection string', value: conn.internal_connection_string },
          { what: 'board admin token', value: adminToken },
        ];
        assert.ok(conn.password.length >= 32 && adminToken.length >= 40);

        const stored = storeBytes(t, kind);
        assert.deepEqual(findAll(stored, secrets), [], 'no secret in the store');
        const logged = Buffer.from(log.text(), 'utf8');
        assert.deepEqual(findAll(logged, secrets), [], 'no secret in the log');
        assert.ok(findAll(stored, [{ what: 'database name', value: dbName }]).length > 0, 'the store scan finds the database name');
        for (const line of ['database connection string revealed', 'kanban admin token revealed']) {
          assert.ok(log.text().includes(line), `the log scan sees the audit line "${line}"`);
        }
      } finally {
        await t.close();
        if (tenantId) await removeTenantWorkloads([tenantId]).catch(() => {});
      }
    });
  });
});
