// Task boards against the real engine: svcd builds the board's image from packages/kanban on the
// Node stand-in (Debian's Node 18, operator-images.ts), runs one per tenant, and the board
// answers on its host port. The browser test is kanban-browser.test.ts.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { KanbanBoard } from '@svc/client';
import { kanbanWorkloadName } from '../src/kanban/kanban.js';
import { ADMIN_TOKEN, freePort, startServer, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, docker, engineTenants } from './images.js';
import { boardApi, runningBoard, settledBoard, type BoardWithColumns } from './kanban-fixtures.js';
import { NODE_IMAGE, ensureNodeImage } from './operator-images.js';
import { killableSvcd } from './svcd-process.js';

async function holdPort(port: number): Promise<Server> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(port, '127.0.0.1', r));
  return s;
}

async function gone(id: string): Promise<void> {
  await assert.rejects(docker.getContainer(kanbanWorkloadName(id)).inspect(), /no such container/i);
  await assert.rejects(docker.getVolume(kanbanWorkloadName(id)).inspect(), /no such volume/i);
}

describe('kanban boards', () => {
  let t: TestServer;
  const logLines: string[] = [];
  const tenants = engineTenants(() => t);
  const tenant = () => tenants.add();
  before(async () => {
    await ensureNodeImage();
    t = await startServer({ realTime: true, config: { adminTokens: [ADMIN_TOKEN] }, logLines });
    t.client.adminToken = ADMIN_TOKEN;
  });
  after(async () => {
    await t.close();
    await tenants.cleanup();
  });

  test('create is asynchronous and one per tenant; the board runs on Node 18, hardened, and takes the revealed admin token', async () => {
    const a = await tenant();
    assert.equal((await a.client.raw('GET', '/v1/kanban')).status, 404);
    const created = await a.client.raw<KanbanBoard>('POST', '/v1/kanban');
    assert.equal(created.status, 202);
    assert.equal(created.body.status, 'provisioning');
    assert.equal(created.body.url, '', 'url is empty until the board runs');
    assert.ok(created.body.host_port >= 7100 && created.body.host_port <= 9100);
    const again = await a.client.raw<{ error: string }>('POST', '/v1/kanban');
    assert.equal(again.status, 409);
    assert.match(again.body.error, /has a task board already/);

    const b = await runningBoard(a.client);
    assert.equal(b.url, `http://127.0.0.1:${created.body.host_port}/`);
    const { admin_token: token, url } = await a.client.kanbanAdminToken();
    assert.equal(url, b.url);
    assert.ok(token.length >= 40);
    assert.equal((await boardApi(b.url, 'not-the-token', 'GET', '/api/boards')).status, 401);
    const board = await boardApi<BoardWithColumns>(b.url, token, 'POST', '/api/boards', { name: 'Roadmap' });
    assert.equal(board.status, 201);
    assert.deepEqual(board.body.columns.map((c) => c.name), ['To do', 'Doing', 'Done']);
    const page = await fetch(b.url);
    assert.match(await page.text(), /svc task board/);

    const info = await docker.getContainer(kanbanWorkloadName(b.id)).inspect();
    assert.deepEqual(info.HostConfig.CapDrop, ['ALL']);
    assert.ok((info.HostConfig.SecurityOpt as string[] | undefined)?.includes('no-new-privileges'));
    assert.equal(info.Mounts[0]?.Name, kanbanWorkloadName(b.id));
    assert.equal(info.Config.User, 'node');
    // Asked of the engine itself, not of svc's deployer (the code under test).
    const engineRuntimes = Object.keys(((await docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {});
    assert.equal(info.HostConfig.Runtime, engineRuntimes.includes('runsc') ? 'runsc' : 'runc', 'under gVisor when the engine has it');
    assert.ok(!JSON.stringify(info.Config.Env).includes(token), 'the container sees only a hash of the token');
    const version = await docker.getContainer(kanbanWorkloadName(b.id)).exec({ Cmd: ['node', '--version'], AttachStdout: true });
    const out = await new Promise<string>((res) => version.start({}, (_e, s) => { let text = ''; s?.on('data', (d: Buffer) => (text += d.toString('latin1'))); s?.on('end', () => res(text)); }));
    assert.match(out, /v18\./, 'the stand-in base image: Debian\'s Node 18');

    const audit = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === 'kanban.admin_token_revealed');
    assert.deepEqual(audit.map((l) => [l.audit, l.tenant_id]), [[true, a.id]], 'one audit line per reveal');
    assert.ok(!logLines.some((l) => l.includes(token)), 'the token itself is never logged');
    const actions = (await a.client.activity({ resource_type: 'kanban' })).map((e) => e.action);
    assert.ok(actions.includes('kanban.created') && actions.includes('kanban.admin_token_revealed'), actions.join());
    const other = await tenant();
    for (const path of ['/v1/kanban', '/v1/kanban/admin-token']) assert.equal((await other.client.raw('GET', path)).status, 404);
    assert.equal((await other.client.raw('DELETE', '/v1/kanban')).status, 404);
    assert.equal((await a.client.kanban()).status, 'running', "another tenant's calls changed nothing");

    assert.equal((await a.client.raw('DELETE', '/v1/kanban')).status, 204);
    await gone(b.id);
    assert.equal((await a.client.raw('GET', '/v1/kanban')).status, 404);
    // Refused, not any failure (an assert.rejects without a matcher would take a bad URL too).
    await assert.rejects(fetch(b.url), (err: unknown) => (err as { cause?: { code?: string } }).cause?.code === 'ECONNREFUSED', 'nothing answers on the freed port');
  });

  test('ports: concurrent creates get distinct ports of a small range, one board per tenant, 409 when the range is full; delete frees the port', async () => {
    const from = 7600;
    const small = await startServer({ realTime: true, config: { kanbanPorts: { from, to: from + 2 } } });
    try {
      const four = await Promise.all([1, 2, 3, 4].map(() => tenants.add(small)));
      // One tenant asking five times at once still gets one board.
      const same = await Promise.all([1, 2, 3, 4, 5].map(() => four[0]!.client.raw<KanbanBoard>('POST', '/v1/kanban')));
      assert.deepEqual(same.map((r) => r.status).sort(), [202, 409, 409, 409, 409]);
      const others = await Promise.all(four.slice(1).map((x) => x.client.raw<KanbanBoard & { error?: string }>('POST', '/v1/kanban')));
      assert.deepEqual(others.map((r) => r.status).sort(), [202, 202, 409]);
      const full = others.find((r) => r.status === 409)!;
      assert.match(full.body.error ?? '', /no free host port/);
      const ports = [same.find((r) => r.status === 202)!.body.host_port, ...others.filter((r) => r.status === 202).map((r) => r.body.host_port)];
      assert.deepEqual([...ports].sort(), [from, from + 1, from + 2], 'every port of the range, each once');

      const loser = four[1 + others.findIndex((r) => r.status === 409)]!;
      const winner = four[1 + others.findIndex((r) => r.status === 202)]!;
      const freed = (await winner.client.kanban()).host_port;
      await settledBoard(winner.client);
      assert.equal((await winner.client.raw('DELETE', '/v1/kanban')).status, 204);
      const next = await loser.client.raw<KanbanBoard>('POST', '/v1/kanban');
      assert.equal(next.status, 202);
      assert.equal(next.body.host_port, freed, 'the freed port is the only free one');
      await Promise.all([four[0]!, loser, ...four.slice(1).filter((x) => x !== loser && x !== winner)].map((x) => settledBoard(x.client)));
    } finally {
      await small.close();
    }
  });

  test('suspension stops the board; revealing the token starts it again, on another port when its own is held outside svc', async () => {
    const a = await tenant();
    await a.client.createKanban();
    const b = await runningBoard(a.client);
    const { admin_token: token } = await a.client.kanbanAdminToken();
    const board = (await boardApi<BoardWithColumns>(b.url, token, 'POST', '/api/boards', { name: 'Kept' })).body;
    await boardApi(b.url, token, 'POST', `/api/columns/${board.columns[0]!.id}/cards`, { title: 'survives suspension' });

    await a.client.raw('DELETE', '/v1/tenant');
    await assert.rejects(docker.getContainer(kanbanWorkloadName(b.id)).inspect(), /no such container/i);
    const back = await t.client.reactivateTenant(a.id);
    const c = a.client.withKey(back.api_key);
    const stopped = await c.kanban();
    assert.equal(stopped.status, 'stopped', 'reactivation leaves it stopped');
    assert.equal(stopped.url, '');

    const held = await holdPort(b.host_port);
    try {
      await c.kanbanAdminToken();
      const moved = await runningBoard(c);
      assert.notEqual(moved.host_port, b.host_port, 'moved off the held port');
      assert.equal(moved.url, `http://127.0.0.1:${moved.host_port}/`);
      const kept = (await boardApi<BoardWithColumns>(moved.url, token, 'GET', `/api/boards/${board.id}`)).body;
      assert.equal(kept.columns[0]!.cards[0]!.title, 'survives suspension', 'same volume, same token');
    } finally {
      held.close();
    }
  });

  test('a board that cannot start ends failed with last_error; it can be deleted and created again', async () => {
    // A base image without Node or a `node` user: the image build fails.
    const broken = await startServer({ realTime: true, config: { kanbanImage: BUSYBOX_IMAGE, kanbanPorts: { from: 7700, to: 7710 } } });
    try {
      const a = await tenants.add(broken);
      const first = await a.client.createKanban();
      const failed = await settledBoard(a.client, 60_000);
      assert.equal(failed.status, 'failed');
      assert.match(failed.last_error ?? '', /building the board image/);
      assert.equal(failed.url, '');
      assert.equal((await a.client.raw('DELETE', '/v1/kanban')).status, 204);
      await gone(first.id);
      const again = await a.client.raw<KanbanBoard>('POST', '/v1/kanban');
      assert.equal(again.status, 202);
      assert.notEqual(again.body.id, first.id);
      await settledBoard(a.client, 60_000);
    } finally {
      await broken.close();
    }
  });
});

describe('kanban boards across a restart of svcd', () => {
  test('the port, the token and the cards survive svcd being killed and the container being removed', async () => {
    await ensureNodeImage();
    const port = await freePort();
    const svcd = await killableSvcd('kanban-restart', ['--kanban-image', NODE_IMAGE, '--kanban-ports', `${port}-${port}`]);
    try {
      const c = svcd.client;
      await c.createKanban();
      const b = await runningBoard(c);
      assert.equal(b.host_port, port);
      const { admin_token: token } = await c.kanbanAdminToken();
      const board = (await boardApi<BoardWithColumns>(b.url, token, 'POST', '/api/boards', { name: 'Durable' })).body;
      await boardApi(b.url, token, 'POST', `/api/columns/${board.columns[1]!.id}/cards`, { title: 'across restarts' });

      await svcd.kill();
      await docker.getContainer(kanbanWorkloadName(b.id)).remove({ force: true });
      const c2 = await svcd.restart();
      await waitFor('the board back', async () => ((await c2.kanban()).status === 'running' && (await docker.getContainer(kanbanWorkloadName(b.id)).inspect().then((i) => i.State.Running, () => false)) ? true : undefined), 120_000);
      assert.equal((await c2.kanban()).url, b.url, 'same port');
      const kept = await waitFor('the card', async () => (await boardApi<BoardWithColumns>(b.url, token, 'GET', `/api/boards/${board.id}`)).body.columns[1]?.cards[0]?.title, 30_000);
      assert.equal(kept, 'across restarts');
    } finally {
      await svcd.close();
    }
  });
});
