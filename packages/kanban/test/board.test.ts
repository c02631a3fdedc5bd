// The board application on its own: its JSON API over real HTTP on a real SQLite file, as the
// container runs it. (svcd's tests run it in its container on Node 18 and in a browser.)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BODY_LIMIT_BYTES, boardApp } from '../src/app.js';
import { BoardStore, DEFAULT_COLUMNS, type Board, type Card } from '../src/store.js';

const TOKEN = 'board-admin-token-for-tests';
const PUBLIC_DIR = new URL('../public/', import.meta.url);

/** An answer of the API, its JSON body taken as the type the caller expects. */
interface Answer<T> {
  status: number;
  body: T;
  headers: Headers;
}

describe('kanban board API', () => {
  let dir: string;
  let store: BoardStore;
  let server: Server;
  let base: string;

  const call = async <T = unknown>(method: string, path: string, body?: unknown, token: string | null = TOKEN): Promise<Answer<T>> => {
    const headers: Record<string, string> = {};
    if (token !== null) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(base + path, { method, headers, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : null) as T, headers: res.headers };
  };

  const start = async () => {
    store = new BoardStore(join(dir, 'board.sqlite'));
    server = createServer(boardApp({ store, adminTokenSha256: createHash('sha256').update(TOKEN).digest('hex'), publicDir: PUBLIC_DIR }));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  const stop = async () => {
    await new Promise((r) => server.close(r));
    store.close();
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-kanban-'));
    await start();
  });
  after(async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the page is public; every API route but health needs the admin token', async () => {
    const page = await fetch(`${base}/`);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>svc task board<\/title>/);
    assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'self'/);
    assert.equal((await fetch(`${base}/board.js`)).headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.deepEqual((await call('GET', '/api/health', undefined, null)).body, { ok: true });
    for (const token of [null, 'wrong-token', '']) {
      const r = await call<{ error: string }>('GET', '/api/boards', undefined, token);
      assert.equal(r.status, 401);
      assert.match(r.body.error, /admin token/);
    }
    assert.equal((await call('GET', '/api/nothing')).status, 404);
    assert.equal((await call('PUT', '/api/boards')).status, 405);
  });

  test('boards start with the default columns; cards are created, edited, moved and deleted', async () => {
    const created = await call<Board>('POST', '/api/boards', { name: '  Launch  ' });
    assert.equal(created.status, 201);
    assert.equal(created.body.name, 'Launch');
    assert.deepEqual(created.body.columns.map((c) => c.name), DEFAULT_COLUMNS);
    const [todo, doing, done] = created.body.columns;
    const card = async (title: string) => (await call<Card>('POST', `/api/columns/${todo!.id}/cards`, { title })).body;
    const a = await card('write docs');
    const b = await card('ship it');
    const c = await card('celebrate');
    assert.deepEqual([a.position, b.position, c.position], [0, 1, 2]);

    const edited = await call<Card>('PATCH', `/api/cards/${a.id}`, { title: 'write the docs', description: 'README first' });
    assert.equal(edited.body.title, 'write the docs');
    assert.equal(edited.body.description, 'README first');

    // Moved to another column: at its end by default, or at a position; the old column closes up.
    assert.equal((await call<Card>('PATCH', `/api/cards/${b.id}`, { column_id: doing!.id })).body.column_id, doing!.id);
    await call('PATCH', `/api/cards/${c.id}`, { column_id: doing!.id, position: 0 });
    // Within its column.
    await call('PATCH', `/api/cards/${a.id}`, { position: 5 });
    let board = (await call<Board>('GET', `/api/boards/${created.body.id}`)).body;
    const titles = (i: number) => board.columns[i]!.cards.map((k) => `${k.title}@${k.position}`);
    assert.deepEqual(titles(0), ['write the docs@0']);
    assert.deepEqual(titles(1), ['celebrate@0', 'ship it@1']);

    const other = (await call<Board>('POST', '/api/boards', { name: 'Other' })).body;
    const foreign = await call<{ error: string }>('PATCH', `/api/cards/${a.id}`, { column_id: other.columns[0]!.id });
    assert.equal(foreign.status, 404, 'a card stays on its board');

    assert.equal((await call('DELETE', `/api/cards/${c.id}`)).status, 204);
    assert.equal((await call('DELETE', `/api/cards/${c.id}`)).status, 404);
    board = (await call<Board>('GET', `/api/boards/${created.body.id}`)).body;
    assert.deepEqual(titles(1), ['ship it@0']);

    // Columns: added at the end, moved, deleted with their cards.
    const extra = (await call<{ id: number; position: number }>('POST', `/api/boards/${created.body.id}/columns`, { name: 'Blocked' })).body;
    assert.equal(extra.position, 3);
    await call('PATCH', `/api/columns/${extra.id}`, { position: 1 });
    await call('DELETE', `/api/columns/${doing!.id}`);
    board = (await call<Board>('GET', `/api/boards/${created.body.id}`)).body;
    assert.deepEqual(board.columns.map((k) => `${k.name}@${k.position}`), ['To do@0', 'Blocked@1', 'Done@2']);
    assert.equal((await call('GET', `/api/cards/${b.id}`)).status, 405);
    assert.equal((await call('PATCH', `/api/cards/${b.id}`, { title: 'x' })).status, 404, 'cards went with their column');
    assert.ok(done);

    assert.equal((await call('PATCH', `/api/boards/${other.id}`, { name: 'Renamed' })).status, 200);
    assert.equal((await call('DELETE', `/api/boards/${other.id}`)).status, 204);
    assert.deepEqual((await call<Array<{ name: string }>>('GET', '/api/boards')).body.map((x) => x.name), ['Launch']);
  });

  test('bad input gets a 4xx with {error} and changes nothing', async () => {
    const before = (await call<unknown[]>('GET', '/api/boards')).body;
    const cases: Array<[string, string, unknown, number, RegExp]> = [
      ['POST', '/api/boards', {}, 400, /name is required/],
      ['POST', '/api/boards', { name: '   ' }, 400, /must not be empty/],
      ['POST', '/api/boards', { name: 'x'.repeat(101) }, 400, /at most 100/],
      ['POST', '/api/boards', { name: 7 }, 400, /must be a string/],
      ['POST', '/api/boards', { name: 'ok', color: 'red' }, 400, /unknown field "color"/],
      ['POST', '/api/boards', '{"name":', 400, /not valid JSON/],
      ['POST', '/api/boards', '[1]', 400, /JSON object/],
      ['POST', '/api/boards', { name: 'x'.repeat(BODY_LIMIT_BYTES) }, 413, /at most/],
      ['PATCH', '/api/cards/1', { position: -1 }, 400, /non-negative integer/],
      ['POST', '/api/columns/999999/cards', { title: 'x' }, 404, /column not found/],
      ['GET', '/api/boards/999999', undefined, 404, /board not found/],
    ];
    for (const [method, path, body, status, message] of cases) {
      const r = await call<{ error: string }>(method, path, body);
      // JSON.stringify(undefined) is undefined, whatever its declared type says.
      assert.equal(r.status, status, `${method} ${path} ${String(JSON.stringify(body) as string | undefined).slice(0, 40)}`);
      assert.match(r.body.error, message);
    }
    const plain = await fetch(`${base}/api/boards`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'text/plain' }, body: 'name' });
    assert.equal(plain.status, 415);
    assert.deepEqual((await call('GET', '/api/boards')).body, before);
  });

  test('the data is in the SQLite file: a restarted board has it', async () => {
    const b = (await call<Board>('POST', '/api/boards', { name: 'Durable' })).body;
    await call('POST', `/api/columns/${b.columns[0]!.id}/cards`, { title: 'still here' });
    await stop();
    await start();
    const again = (await call<Board>('GET', `/api/boards/${b.id}`)).body;
    assert.equal(again.columns[0]!.cards[0]!.title, 'still here');
  });
});
