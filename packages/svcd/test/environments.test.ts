// Developer environments against the real engine, on template stand-ins built from Debian's
// packages (operator-images.ts): exec, leases and their expiry, sync from an HTTPS git server
// with its own certificate, and previews through a real Caddy.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createHash, randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type { Environment, ExecEvent, ExecRequest, ExecResult } from '@svc/client';
import { FILE_MAX_BYTES } from '@svc/contract';
import { environmentWorkloadName, workloadOf } from '../src/environments/environments.js';
import { AGENT_PORT } from '../src/environments/agent.js';
import { ADMIN_TOKEN, freePort, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { docker, engineTenants } from './images.js';

type Client = TestServer['client'];

/** A file's content in the environment, '' when it is not there. */
async function readMarker(client: Client, envId: string, path: string): Promise<string> {
  return (await client.exec(envId, { command: ['sh', '-c', `cat ${path} 2>/dev/null || true`] })).stdout;
}

/** Waits until a marker a loop rewrites stops changing (read 700 ms apart): its writer is gone. */
async function markerStops(client: Client, envId: string, path: string, what: string): Promise<void> {
  await waitFor(what, async () => {
    const one = await readMarker(client, envId, path);
    if (one === '') throw new Error(`${path} is not there`);
    await new Promise((r) => setTimeout(r, 700));
    return (await readMarker(client, envId, path)) === one ? true : undefined;
  }, 20_000);
}
import { startHttpsGitServer, type HttpsGitServer } from './git-fixtures.js';
import { TEMPLATE_IMAGES, ensureTemplateImages } from './operator-images.js';

describe('environments', () => {
  let t: TestServer;
  /** svcd's log lines (exec says which way each command went). */
  const lines: string[] = [];
  let git: HttpsGitServer;
  let proxyPort: number;
  const tenants = engineTenants(() => t);
  const tenant = () => tenants.add();
  before(async () => {
    await ensureTemplateImages();
    git = await startHttpsGitServer();
    proxyPort = await freePort();
    t = await startServer({
      realTime: true,
      config: { adminTokens: [ADMIN_TOKEN], gitCaFile: git.caFile, proxyListen: `127.0.0.1:${proxyPort}` },
      overrides: { environmentReapEveryMs: 300 },
      logLines: lines,
    });
    t.client.adminToken = ADMIN_TOKEN;
  });
  after(async () => {
    await t.close();
    await git.stop();
    await tenants.cleanup();
  });

  test('templates: four, with their images and resources', async () => {
    const a = await tenant();
    const list = await a.client.templates();
    assert.deepEqual(list.map((x) => [x.id, x.image]), Object.entries(TEMPLATE_IMAGES));
    assert.equal((await a.client.template('python')).resources.memory_mb, 1024);
    assert.equal((await a.client.raw('GET', '/v1/environments/templates/ruby')).status, 404);
  });

  test('validation and quota: names, templates, leases, max_environments; other tenants see nothing', async () => {
    const a = await tenant();
    const bad: Array<[unknown, number, RegExp]> = [
      [{ name: '1env', template_id: 'default' }, 400, /name/],
      [{ name: 'has space', template_id: 'default' }, 400, /name/],
      [{ name: 'ok', template_id: 'ruby' }, 400, /template_id must be one of default, node, python, go/],
      [{ name: 'ok', template_id: 'default', lease_duration_seconds: 0 }, 400, /lease_duration_seconds/],
      [{ name: 'ok' }, 400, /template_id/],
    ];
    for (const [body, status, msg] of bad) {
      const r = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body });
      assert.equal(r.status, status, JSON.stringify(body));
      assert.match(r.body.error, msg);
    }
    assert.deepEqual(await a.client.environments(), [], 'refused creates left nothing');
    const one = await a.client.createEnvironment({ name: 'one', template_id: 'default' });
    assert.equal(one.status, 'running');
    const dup = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'one', template_id: 'default' } });
    assert.equal(dup.status, 409);
    assert.match(dup.body.error, /exists/);
    await a.client.createEnvironment({ name: 'two', template_id: 'default' });
    const third = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'three', template_id: 'default' } });
    assert.equal(third.status, 409);
    assert.match(third.body.error, /quota exceeded: max_environments \(2\)/);
    assert.equal((await a.client.usage()).environments.used, 2);

    const other = await tenant();
    for (const [method, path] of [['GET', ''], ['DELETE', ''], ['POST', '/start'], ['POST', '/stop'], ['GET', '/previews']] as const) {
      assert.equal((await other.client.raw(method, `/v1/environments/${one.id}${path}`)).status, 404, `${method} ${path}`);
    }
    assert.equal((await other.client.raw('POST', `/v1/environments/${one.id}/exec`, { body: { command: ['true'] } })).status, 404);
    assert.equal((await a.client.raw('DELETE', `/v1/environments/${one.id}`)).status, 204);
    await assert.rejects(docker.getVolume(environmentWorkloadName(one.id)).inspect(), /no such volume/i);
  });

  test('exec: argv as given, exit codes, stdout and stderr apart, work_dir, timeout, truncation, never replayed', async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'exec', template_id: 'default', lease_duration_seconds: 600 });
    assert.ok(env.lease_expires_at > Date.now() / 1000 + 590);
    const info = await docker.getContainer(environmentWorkloadName(env.id)).inspect();
    assert.deepEqual(info.HostConfig.CapDrop, ['ALL']);
    assert.equal(info.Mounts.find((m) => m.Destination === '/workspace')?.Name, environmentWorkloadName(env.id));

    const run = (command: string[], extra: { work_dir?: string; timeout?: number } = {}) => a.client.exec(env.id, { command, ...extra });
    const r = await run(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    assert.deepEqual([r.exit_code, r.stdout, r.stderr, r.truncated, r.timed_out], [3, 'out\n', 'err\n', false, false]);
    assert.equal((await run(['echo', '$HOME', '*'])).stdout, '$HOME *\n', 'no shell expands anything');
    assert.equal((await run(['pwd'])).stdout, '/workspace\n');
    assert.equal((await run(['pwd'], { work_dir: '/tmp' })).stdout, '/tmp\n');
    assert.equal((await run(['no-such-program'])).exit_code, 127);
    const missingDir = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['pwd'], work_dir: '/nope' } });
    assert.equal(missingDir.status, 400);
    assert.match(missingDir.body.error, /work_dir/);

    const slow = await run(['sleep', '30'], { timeout: 1 });
    assert.equal(slow.timed_out, true);
    assert.notEqual(slow.exit_code, 0);
    assert.ok(slow.duration_ms >= 1000 && slow.duration_ms < 10_000, String(slow.duration_ms));

    const big = await run(['head', '-c', '3000000', '/dev/zero']);
    assert.equal(big.truncated, true);
    assert.equal(Buffer.byteLength(big.stdout), 1024 * 1024);
    assert.equal(big.exit_code, 0);

    for (const [body, msg] of [[{ command: [] }, /command/], [{ command: ['true'], timeout: 301 }, /timeout/], [{ command: ['true'], timeout: 0 }, /timeout/], [{ command: 'true' }, /command/]] as const) {
      const bad = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec`, { body });
      assert.equal(bad.status, 400, JSON.stringify(body));
      assert.match(bad.body.error, msg);
    }

    // The same Idempotency-Key twice: the command runs twice (spec: exec is never replayed).
    const once = () => a.client.raw<ExecResult>('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['date', '+%s%N'] }, headers: { 'idempotency-key': 'same-key' } });
    const [x, y] = [await once(), await once()];
    assert.notEqual(x.body.stdout, y.body.stdout);
    assert.equal(y.headers.get('idempotent-replayed'), null);
  });

  test("exec goes through the environment's agent, which answers only with its token; when the agent is not reached, through the engine", async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'agent', template_id: 'default' });
    const row = await t.deps.store.environments.findAny(env.id);
    assert.ok(row?.agent_token && row.address);
    const token = t.deps.sealer.open(row.agent_token);
    // What anything on the tenant's network reaches: refused without the token, a command run with it.
    const ask = (bearer: string) =>
      fetch(`http://${row.address}:${AGENT_PORT}/exec`, {
        method: 'POST',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
        body: JSON.stringify({ argv: ['echo', 'hi'], work_dir: '/', timeout_seconds: 5, max_output_bytes: 100 }),
      });
    assert.equal((await ask('not-the-token')).status, 401);
    const allowed = await ask(token);
    assert.equal(allowed.status, 200);
    // Output comes as base64 (bytes, not JSON text).
    assert.equal(Buffer.from(((await allowed.json()) as { stdout: string }).stdout, 'base64').toString(), 'hi\n');

    const execs = () => lines.filter((l) => l.includes('"msg":"environment exec"'));
    lines.length = 0;
    assert.equal((await a.client.exec(env.id, { command: ['echo', 'x'] })).stdout, 'x\n');
    assert.match(execs().at(-1) ?? '', /"via":"agent"/);
    assert.equal((await a.client.exec(env.id, { command: ['sh', '-c', 'echo ${SVC_AGENT_TOKEN:-none}'] })).stdout, 'none\n', 'commands do not see the token');

    // A token the agent does not take (as a container that is not this environment's would):
    // nothing ran there, so the engine runs it, and the log says why.
    await t.deps.store.environments.update(env.id, { agent_token: t.deps.sealer.seal('not-the-token') });
    lines.length = 0;
    assert.equal((await a.client.exec(env.id, { command: ['echo', 'y'] })).stdout, 'y\n');
    assert.match(execs().at(-1) ?? '', /"via":"engine"/);
    assert.ok(lines.some((l) => l.includes('agent was not reached')));
    // The engine's exec gets the container's environment, where svc-init's token is: taken out.
    assert.equal((await a.client.exec(env.id, { command: ['sh', '-c', 'echo ${SVC_AGENT_TOKEN:-none}'] })).stdout, 'none\n', 'not on the engine path either');
    assert.match(execs().at(-1) ?? '', /"via":"engine"/);

    // The environment stopped while a command runs through the agent: 409, not a server error.
    await t.deps.store.environments.update(env.id, { agent_token: row.agent_token });
    const began = `/tmp/began-${String(Date.now())}`;
    const running = a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['sh', '-c', `touch ${began}; exec sleep 20`] } });
    // Stopped once the command runs (not after a fixed moment: on a loaded machine it may not have yet).
    await waitFor('the command to run', async () => ((await a.client.exec(env.id, { command: ['test', '-e', began] })).exit_code === 0 ? true : undefined), 20_000);
    await a.client.stopEnvironment(env.id);
    const cut = await running;
    assert.equal(cut.status, 409);
    assert.match(cut.body.error, /stopped while the command ran/);
  });

  test('streamed exec: output as it comes and the exit last; env and stdin; a reader that leaves kills the command; through the engine, output at the end', async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'stream', template_id: 'default' });
    const collect = async (req: Omit<ExecRequest, 'stream'>) => {
      const started = performance.now();
      const events: Array<ExecEvent & { at: number }> = [];
      for await (const e of a.client.execStream(env.id, req)) events.push({ ...e, at: performance.now() - started });
      return events;
    };
    const events = await collect({ command: ['sh', '-c', 'echo first; sleep 2; echo second >&2; exit 3'] });
    assert.deepEqual(events.map((e) => (e.type === 'exit' ? { type: e.type, exit_code: e.exit_code, timed_out: e.timed_out } : { type: e.type, ...('data' in e ? { data: e.data } : {}) })), [
      { type: 'stdout', data: 'first\n' },
      { type: 'stderr', data: 'second\n' },
      { type: 'exit', exit_code: 3, timed_out: false },
    ]);
    // The first line came while the command still slept: streamed, not held to the end (measured
    // between the two, not from the request: the exec's start under gVisor varies with the load).
    assert.ok(events[2]!.at - events[0]!.at >= 1_500, `first at ${events[0]!.at} ms, exit at ${events[2]!.at} ms`);

    // A character split between two pieces of output comes whole: its first byte is printed,
    // then its second half a second later.
    const split = await collect({ command: ['sh', '-c', "printf 'a\\303'; sleep 0.5; printf '\\251b'"] });
    assert.deepEqual(split.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data), ['a', 'éb']);

    // env and stdin, beyond the spec, on both exec forms.
    const withInput = { command: ['sh', '-c', 'echo "$GREETING"; cat'], env: { GREETING: 'hello' }, stdin: 'from stdin' };
    assert.equal((await a.client.exec(env.id, withInput)).stdout, 'hello\nfrom stdin');
    assert.deepEqual((await collect(withInput)).filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data).join(''), 'hello\nfrom stdin');

    // Refusals come before the stream, as statuses of their own.
    const refused = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['true'], work_dir: '/nonexistent', stream: true } });
    assert.equal(refused.status, 400);
    assert.match(refused.body.error, /work_dir/);

    // A reader that leaves: the command is killed, not left running (the marker stops moving).
    const leaving = new AbortController();
    const ticking = a.client.execStream(env.id, { command: ['sh', '-c', 'while :; do date +%s%N > /workspace/alive; echo tick; sleep 0.1; done'], timeout: 120 }, leaving.signal);
    const firstTick: IteratorResult<ExecEvent> = await ticking.next();
    assert.equal(firstTick.done ? null : firstTick.value.type, 'stdout');
    leaving.abort();
    await assert.rejects(ticking.next());
    await markerStops(a.client, env.id, '/workspace/alive', 'the command to stop once its reader left');

    // The agent not reached (a token it does not take): the engine runs it, its output at the end.
    const row = await t.deps.store.environments.findAny(env.id);
    await t.deps.store.environments.update(env.id, { agent_token: t.deps.sealer.seal('not-the-token') });
    lines.length = 0;
    const viaEngine = await collect(withInput);
    assert.deepEqual(viaEngine.map((e) => e.type), ['stdout', 'exit']);
    assert.equal((viaEngine[0] as { data: string }).data, 'hello\nfrom stdin');
    assert.match(lines.filter((l) => l.includes('"msg":"environment exec"')).at(-1) ?? '', /"via":"engine".*"stream":true/);
    await t.deps.store.environments.update(env.id, { agent_token: row!.agent_token });
  });

  test('a streamed exec is signalled by the id its answer names, through the agent, by its tenant only; a command through the engine has no id', async () => {
    const a = await tenant();
    const b = await tenant();
    const env = await a.client.createEnvironment({ name: 'signals', template_id: 'default' });
    // The command traps SIGINT and says so, as a program handling ^C would; its child sleeps in the same group.
    const { execId, events } = await a.client.startExec(env.id, { command: ['sh', '-c', `trap 'echo got-int; exit 3' INT; echo ready; while :; do sleep 0.1; done`], timeout: 60 });
    assert.match(execId ?? '', /^[a-f0-9]{24}$/);
    const seen: ExecEvent[] = [];
    const first = await events.next();
    if (!first.done) seen.push(first.value);
    assert.deepEqual(seen, [{ type: 'stdout', data: 'ready\n' }]);

    // Another tenant cannot reach it (the environment is not theirs: the same 404 as a missing one);
    // a name outside the list, and an id that is not one, are 400.
    const foreign = await b.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec/${execId}/signal`, { body: { signal: 'SIGKILL' } });
    assert.equal(foreign.status, 404);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/exec/${execId}/signal`, { body: { signal: 'SIGSTOP' } })).status, 400);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/exec/NOT-AN-ID/signal`, { body: { signal: 'SIGINT' } })).status, 400);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/exec/${'0'.repeat(24)}/signal`, { body: { signal: 'SIGINT' } })).status, 404);

    // Its tenant's SIGINT: the trap runs and the command ends with its own exit code.
    assert.deepEqual(await a.client.signalExec(env.id, execId!, 'SIGINT'), { exec_id: execId, signal: 'SIGINT', delivered: true });
    for await (const e of events) seen.push(e);
    assert.deepEqual(seen.slice(1).map((e) => (e.type === 'exit' ? { type: e.type, exit_code: e.exit_code, timed_out: e.timed_out } : e)), [
      { type: 'stdout', data: 'got-int\n' },
      { type: 'exit', exit_code: 3, timed_out: false },
    ]);
    // Ended: its id names nothing any more.
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/exec/${execId}/signal`, { body: { signal: 'SIGINT' } })).status, 404);

    // Through the engine (the agent not reached): no id to signal by.
    const row = await t.deps.store.environments.findAny(env.id);
    await t.deps.store.environments.update(env.id, { agent_token: t.deps.sealer.seal('not-the-token') });
    const viaEngine = await a.client.startExec(env.id, { command: ['true'] });
    assert.equal(viaEngine.execId, null);
    for await (const e of viaEngine.events) assert.notEqual(e.type, 'error');
    await t.deps.store.environments.update(env.id, { agent_token: row!.agent_token });
  });

  test('files: write, stat, list, read and remove through the agent; binary content whole; caps; devices; errors the caller can act on; other tenants see nothing', async () => {
    const a = await tenant();
    const b = await tenant();
    const env = await a.client.createEnvironment({ name: 'files', template_id: 'default' });

    const written = await a.client.writeFile(env.id, 'notes/todo.txt', 'write the tests\n', '0600');
    assert.deepEqual([written.path, written.type, written.size, written.mode], ['/workspace/notes/todo.txt', 'file', 16, '0600']);
    assert.equal((await a.client.exec(env.id, { command: ['cat', '/workspace/notes/todo.txt'] })).stdout, 'write the tests\n', 'commands see what was written');
    assert.equal(await new Response(await a.client.readFile(env.id, '/workspace/notes/todo.txt')).text(), 'write the tests\n');

    // Binary content, 3 MiB of it, comes back byte for byte.
    const bytes = new Uint8Array(randomBytes(3 * 1024 * 1024));
    await a.client.writeFile(env.id, '/tmp/blob', bytes);
    const back = Buffer.from(await new Response(await a.client.readFile(env.id, '/tmp/blob')).arrayBuffer());
    assert.ok(back.equals(Buffer.from(bytes)), 'the blob came back changed');
    assert.equal((await a.client.exec(env.id, { command: ['sha256sum', '/tmp/blob'] })).stdout.split(' ')[0], createHash('sha256').update(bytes).digest('hex'));

    await a.client.exec(env.id, { command: ['ln', '-s', 'todo.txt', '/workspace/notes/link'] });
    const list = await a.client.listFiles(env.id, 'notes');
    assert.deepEqual(list.entries.map((e) => [e.name, e.type, e.link_target ?? null]), [['link', 'symlink', 'todo.txt'], ['todo.txt', 'file', null]]);
    assert.equal((await a.client.statFile(env.id, '/workspace/notes')).type, 'directory');

    const status = async (method: string, path: string, query: Record<string, string>) => (await a.client.raw<{ error: string }>(method, `/v1/environments/${env.id}${path}`, { query })).status;
    assert.equal(await status('GET', '/files/stat', { path: 'nothing-here' }), 404);
    assert.equal(await status('GET', '/files', { path: '/dev/zero' }), 400, 'a device would never end');
    assert.equal(await status('GET', '/files', { path: '/workspace/notes' }), 400, 'a directory is listed, not read');
    assert.equal(await status('DELETE', '/files', { path: '/workspace/notes' }), 409, 'a directory with entries needs recursive');
    assert.equal(await status('DELETE', '/files', { path: '/workspace/notes', recursive: 'true' }), 204);
    assert.equal(await status('GET', '/files/stat', { path: '/workspace/notes' }), 404);
    assert.equal(await status('DELETE', '/files', { path: '/' }), 400);

    // Past the cap: refused on its declared length before anything is read, and cut when it streams past it.
    assert.equal(await uploadStatus(env.id, a.key, { declared: FILE_MAX_BYTES + 1, send: 0 }), 413);
    assert.equal(await uploadStatus(env.id, a.key, { send: FILE_MAX_BYTES + 1024 * 1024 }), 413);
    assert.equal(await status('GET', '/files/stat', { path: '/workspace/big' }), 404, 'nothing of a refused upload is left');
    assert.equal((await a.client.exec(env.id, { command: ['sh', '-c', 'ls -A /workspace | grep -c svc-upload || true'] })).stdout.trim(), '0');

    // Another tenant: the same 404 as for an environment that does not exist.
    assert.equal((await b.client.raw('GET', `/v1/environments/${env.id}/files/stat`, { query: { path: '/' } })).status, 404);
    assert.equal((await b.client.raw('PUT', `/v1/environments/${env.id}/files`, { query: { path: '/tmp/x' }, rawBody: 'x' })).status, 404);

    // The agent not reached: 503 that says so (files have no engine path); a stopped environment: 409.
    const row = await t.deps.store.environments.findAny(env.id);
    await t.deps.store.environments.update(env.id, { agent_token: t.deps.sealer.seal('not-the-token') });
    const unreachable = await a.client.raw<{ error: string }>('GET', `/v1/environments/${env.id}/files/stat`, { query: { path: '/' } });
    assert.equal(unreachable.status, 503);
    assert.match(unreachable.body.error, /agent does not answer/);
    await t.deps.store.environments.update(env.id, { agent_token: row!.agent_token });
    await a.client.stopEnvironment(env.id);
    assert.equal(await status('GET', '/files/stat', { path: '/' }), 409);
  });

  test('terminal: a WebSocket to a login shell on a pseudo-terminal, with resize and the exit code; refused before the upgrade with a status; the shell hung up when the client leaves', async () => {
    const a = await tenant();
    const b = await tenant();
    const env = await a.client.createEnvironment({ name: 'term', template_id: 'default' });
    const session = (client: typeof a.client) =>
      new Promise<{ output: string; exit: number | null; code: number }>((resolve, reject) => {
        const socket = client.terminal(env.id, { cols: 80, rows: 24 });
        let output = '';
        let exit: number | null = null;
        socket.addEventListener('open', () => {
          socket.send(JSON.stringify({ type: 'resize', cols: 120, rows: 40 }));
          socket.send(new TextEncoder().encode('stty size; tty; pwd; echo hi-$((2+3)); exit 5\n'));
        });
        socket.addEventListener('message', (event: MessageEvent) => {
          if (typeof event.data === 'string') exit = (JSON.parse(event.data) as { exit_code: number }).exit_code;
          else output += Buffer.from(event.data as ArrayBuffer).toString();
        });
        socket.addEventListener('error', () => reject(new Error('the terminal failed')));
        socket.addEventListener('close', (event: CloseEvent) => resolve({ output, exit, code: event.code }));
      });
    const done = await session(a.client);
    assert.equal(done.exit, 5);
    assert.equal(done.code, 1000);
    assert.match(done.output, /40 120/, 'the resize reached the terminal');
    assert.match(done.output, /\/dev\/pts\/\d+/);
    assert.match(done.output, /\/workspace/);
    assert.match(done.output, /hi-5/);

    // Refused before the upgrade, with the statuses of every route: another tenant's 404, no key
    // 401; and the refused connection is closed by svcd (a refused upgrade cannot be reused, and
    // one left open would be a socket held for good).
    const upgrade = (key: string | null) =>
      new Promise<{ status: number; closedBySvcd: boolean }>((resolve, reject) => {
        const req = httpRequest(`${t.url}/v1/environments/${env.id}/terminal`, {
          agent: false,
          headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64'), ...(key ? { authorization: `Bearer ${key}` } : {}) },
        });
        req.on('upgrade', (res, socket) => {
          socket.destroy();
          resolve({ status: res.statusCode ?? 0, closedBySvcd: false });
        });
        req.on('response', (res) => {
          res.resume();
          const socket = req.socket;
          const timer = setTimeout(() => {
            socket?.destroy();
            resolve({ status: res.statusCode ?? 0, closedBySvcd: false });
          }, 3_000);
          socket?.once('close', () => {
            clearTimeout(timer);
            resolve({ status: res.statusCode ?? 0, closedBySvcd: true });
          });
        });
        req.on('error', reject);
        req.end();
      });
    assert.equal((await upgrade(a.key)).status, 101, 'the probe itself upgrades with the right key');
    assert.deepEqual(await upgrade(b.key), { status: 404, closedBySvcd: true });
    assert.deepEqual(await upgrade(null), { status: 401, closedBySvcd: true });
    // A plain GET is told what the route needs.
    const plain = await a.client.raw<{ error: string }>('GET', `/v1/environments/${env.id}/terminal`);
    assert.equal(plain.status, 426);
    assert.match(plain.body.error, /WebSocket/);

    // A client that leaves: the shell is hung up (a command ignoring SIGHUP is killed after a grace).
    const leaving = a.client.terminal(env.id, { cols: 80, rows: 24 });
    await new Promise((r) => leaving.addEventListener('open', r));
    const marker = '/workspace/alive-terminal';
    leaving.send(new TextEncoder().encode(`trap '' HUP; while :; do date +%s%N > ${marker}; sleep 0.1; done\n`));
    // The probe sees the loop run (its marker moves) before the client leaves...
    await waitFor('the shell loop to move its marker', async () => {
      const one = await readMarker(a.client, env.id, marker);
      if (one === '') return undefined;
      await new Promise((r) => setTimeout(r, 300));
      return (await readMarker(a.client, env.id, marker)) !== one ? true : undefined;
    }, 20_000);
    leaving.close();
    // ...and stop once it left (the 2 s grace, and the close's way through svcd and gVisor).
    await markerStops(a.client, env.id, marker, 'the shell to be hung up with its terminal');

    // Clients that go while their terminal opens (before the upgrade completes): each terminal
    // goes with its connection, and so does its exec slot.
    const slots = () => t.deps.store.sessionSlots.countLive(a.id, 'exec', Date.now());
    assert.equal(await slots(), 0);
    for (let i = 0; i < 3; i++) {
      lines.length = 0;
      const req = httpRequest(`${t.url}/v1/environments/${env.id}/terminal`, {
        agent: false,
        headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64'), authorization: `Bearer ${a.key}` },
      });
      req.on('error', () => {});
      req.end();
      // Gone once svcd has the request, while the terminal opens (the agent's shell takes longer than that).
      while (!lines.some((l) => l.includes('incoming request') && l.includes('/terminal'))) await new Promise(setImmediate);
      req.destroy();
    }
    await waitFor('a terminal to open (the case is one of a terminal going while it opens)', async () => (lines.some((l) => l.includes('environment terminal opened')) ? true : undefined), 10_000);
    await waitFor('the slots of terminals whose clients left', async () => (await slots()) === 0, 10_000);

    await a.client.stopEnvironment(env.id);
    assert.deepEqual(await upgrade(a.key), { status: 409, closedBySvcd: true });
  });

  /** An upload on a raw connection: a declared length, or bytes sent chunked until svcd answers. */
  function uploadStatus(envId: string, key: string, o: { declared?: number; send: number }): Promise<number> {
    return new Promise((resolve, reject) => {
      const url = new URL(`${t.url}/v1/environments/${envId}/files?path=/workspace/big`);
      const req = httpRequest(url, {
        method: 'PUT',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/octet-stream', ...(o.declared === undefined ? {} : { 'content-length': String(o.declared) }) },
      });
      let answered = false;
      req.on('response', (res) => {
        answered = true;
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('error', (err) => {
        if (!answered) reject(err);
      });
      const chunk = Buffer.alloc(1024 * 1024, 7);
      let sent = 0;
      const pump = () => {
        while (!answered && sent < o.send) {
          sent += chunk.length;
          if (!req.write(chunk)) {
            req.once('drain', pump);
            return;
          }
        }
        if (!answered && o.declared === undefined) req.end();
      };
      if (o.declared !== undefined) req.flushHeaders();
      else pump();
    });
  }

  test('stop keeps the workspace; start runs it again; exec on a stopped environment is 409', async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'cycle', template_id: 'default' });
    await a.client.exec(env.id, { command: ['sh', '-c', 'echo kept > note.txt'] });
    assert.equal((await a.client.stopEnvironment(env.id)).status, 'stopped');
    const refused = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['true'] } });
    assert.equal(refused.status, 409);
    assert.match(refused.body.error, /stopped: start it first/);
    assert.equal((await a.client.startEnvironment(env.id)).status, 'running');
    assert.equal((await a.client.exec(env.id, { command: ['cat', 'note.txt'] })).stdout, 'kept\n');
    const actions = (await a.client.activity({ resource_type: 'environment' })).map((e) => e.action);
    for (const act of ['environment.created', 'environment.stopped', 'environment.started']) assert.ok(actions.includes(act), act);

    // Suspension stops it too.
    await a.client.raw('DELETE', '/v1/tenant');
    assert.equal((await t.deps.store.environments.findAny(env.id))?.status, 'stopped');
    assert.equal((await docker.getContainer(environmentWorkloadName(env.id)).inspect()).State.Running, false);
  });

  test('lease: expiry stops the environment (expired) and keeps the workspace; extending and starting revive it; 24 h later it is removed', async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'leased', template_id: 'default', lease_duration_seconds: 600 });
    await a.client.exec(env.id, { command: ['sh', '-c', 'echo survives > f'] });
    // A one-second lease from now: the reaper (every 300 ms here) ends it.
    await a.client.extendLease(env.id, 1);
    const expired = await waitFor('the lease to end', async () => {
      const now = await a.client.environment(env.id);
      return now.status === 'expired' ? now : undefined;
    }, 15_000);
    assert.ok(expired.removal_at && expired.removal_at >= expired.updated_at + 24 * 3600 - 1);
    // The record says expired in the transaction that asks for the stop; the controller stops it right after.
    await waitFor('the container to stop', async () => ((await docker.getContainer(environmentWorkloadName(env.id)).inspect()).State.Running ? undefined : true), 15_000);
    const refused = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/start`);
    assert.equal(refused.status, 409);
    assert.match(refused.body.error, /lease has ended/);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/lease`, { body: { duration_seconds: 0 } })).status, 400);

    const revived = await a.client.extendLease(env.id, 600);
    assert.equal(revived.status, 'stopped');
    assert.ok(revived.lease_expires_at >= Date.now() / 1000 + 590);
    await a.client.startEnvironment(env.id);
    assert.equal((await a.client.exec(env.id, { command: ['cat', 'f'] })).stdout, 'survives\n');

    // Expired a day ago: the reaper removes the environment and its workspace.
    await t.deps.store.environments.update(env.id, { status: 'expired', expired_at: Math.floor(Date.now() / 1000) - 24 * 3600 - 1 });
    await t.deps.environments.reap();
    assert.equal((await a.client.raw('GET', `/v1/environments/${env.id}`)).status, 404);
    await assert.rejects(docker.getVolume(environmentWorkloadName(env.id)).inspect(), /no such volume/i);
    assert.ok((await a.client.activity({ resource_type: 'environment' })).some((e) => e.action === 'environment.removed'));
  });

  test('sync: clones over HTTPS (the CA from --git-ca-file) into /workspace/<repo>, at a tag, then updates to main; failures carry git\'s message', async () => {
    const a = await tenant();
    // The default template (Ubuntu) has no git: svc clones on its side and copies the checkout in.
    const env = await a.client.createEnvironment({ name: 'synced', template_id: 'default' });
    const first = await a.client.sync(env.id, { git_url: git.url('project'), git_ref: 'v1' });
    assert.deepEqual([first.path, first.commit], ['/workspace/project', git.shas.v1]);
    assert.equal((await a.client.exec(env.id, { command: ['sh', 'project/hello.sh'] })).stdout, 'hello from v1\n');
    await a.client.exec(env.id, { command: ['touch', 'project/stale-file'] });
    const second = await a.client.sync(env.id, { git_url: git.url('project') });
    assert.equal(second.commit, git.shas.v2);
    assert.equal((await a.client.exec(env.id, { command: ['sh', 'project/hello.sh'] })).stdout, 'hello from v2\n');
    // (A shell glob, not ls: Debian's gVisor build answers coreutils 9's statx with EINVAL.)
    const listing = await a.client.exec(env.id, { command: ['sh', '-c', 'cd project && echo * && test -d .git && echo has-git'] });
    assert.equal(listing.stdout, 'README.md hello.sh\nhas-git\n', `the old checkout was replaced (${listing.stderr})`);

    const missing = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/sync`, { body: { git_url: git.url('project'), git_ref: 'no-such-branch' } });
    assert.equal(missing.status, 422);
    assert.match(missing.body.error, /sync failed: .*no-such-branch/);
    const plain = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/sync`, { body: { git_url: 'http://127.0.0.1/x.git' } });
    assert.equal(plain.status, 400);
    assert.match(plain.body.error, /git_url/);
    const privateHost = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/sync`, { body: { git_url: 'https://10.1.2.3/x.git' } });
    assert.equal(privateHost.status, 400);
    assert.match(privateHost.body.error, /public address/);
  });

  test('previews: a URL through the proxy to a port of the environment; 503 while it is stopped; gone when deleted', async () => {
    const a = await tenant();
    const env = await a.client.createEnvironment({ name: 'web', template_id: 'python' });
    await a.client.exec(env.id, { command: ['sh', '-c', 'echo preview-page > index.html && (python3 -m http.server 8000 >/dev/null 2>&1 &)'] });
    const p = await a.client.createPreview(env.id, { name: 'site', port: 8000 });
    assert.equal(p.url, `http://${p.id}.localhost:${proxyPort}`);
    const host = `${p.id}.localhost:${proxyPort}`;
    const page = await waitFor('the preview', async () => {
      const r = await viaProxy(proxyPort, host, '/index.html').catch(() => undefined);
      return r?.status === 200 ? r : undefined;
    });
    assert.equal(page.body, 'preview-page\n');
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/previews`, { body: { name: 'site', port: 9000 } })).status, 409);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/previews`, { body: { name: '-bad', port: 9000 } })).status, 400);
    assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/previews`, { body: { name: 'big', port: 70000 } })).status, 400);
    assert.deepEqual((await a.client.previews(env.id)).map((x) => x.name), ['site']);

    await a.client.stopEnvironment(env.id);
    const stopped = await waitFor('the preview to say stopped', async () => {
      const r = await viaProxy(proxyPort, host).catch(() => undefined);
      return r?.status === 503 ? r : undefined;
    });
    assert.match(stopped.body, /Preview site of environment web is stopped/);

    assert.equal((await a.client.raw('DELETE', `/v1/environments/${env.id}/previews/${p.id}`)).status, 204);
    assert.equal((await a.client.raw('DELETE', `/v1/environments/${env.id}/previews/${p.id}`)).status, 404);
    await waitFor('the route to go', async () => ((await viaProxy(proxyPort, host).catch(() => undefined))?.status === 404 ? true : undefined));
  });

  test('each template runs its tools', async () => {
    const a = await tenant();
    const checks: Array<[string, string[], RegExp]> = [
      ['node', ['node', '--version'], /^v\d+\./],
      ['python', ['python3', '--version'], /^Python 3\./],
      ['go', ['go', 'version'], /^go version go1\./],
    ];
    const envs: Environment[] = [];
    for (const [template, command, expected] of checks) {
      const env = await a.client.createEnvironment({ name: `t-${template}`, template_id: template });
      envs.push(env);
      const r = await a.client.exec(env.id, { command });
      assert.match(r.stdout + r.stderr, expected, template);
      // Two environments per tenant (the default quota): make room for the next template.
      if (envs.length === 2) await a.client.deleteEnvironment(envs[0]!.id);
    }
    assert.deepEqual(envs.map((e) => e.template_id), ['node', 'python', 'go']);
  });
});

describe('environments: the warm pool', () => {
  let t: TestServer;
  const tenants = engineTenants(() => t);
  const ready = async (template: 'default' | 'node') => t.deps.store.warmPool.ready(template, TEMPLATE_IMAGES[template], 'nobody');
  before(async () => {
    await ensureTemplateImages();
    t = await startServer({ realTime: true, config: { environmentWarmPool: 1 } });
  });
  after(async () => {
    // Pool containers outlive svcd on purpose (the next start uses them), and handed-over ones
    // keep their pool label: remove this server's by name.
    const workloads = [...(await t.deps.store.warmPool.all()).map((w) => w.workload), ...(await t.deps.store.environments.listAll()).map(workloadOf)];
    await t.close();
    for (const name of workloads) {
      await docker.getContainer(name).remove({ force: true }).catch(() => {});
      await docker.getVolume(name).remove().catch(() => {});
    }
    await tenants.cleanup();
  });

  test('a create takes a ready container, fresh and moved onto the tenant network; concurrent creates never share one; the pool refills', async () => {
    await waitFor('the pool to fill', async () => ((await ready('default')).length === 1 && (await ready('node')).length === 1 ? true : undefined), 120_000);
    const [pooled] = await ready('default');
    const warmInfo = await docker.getContainer(pooled!.workload).inspect();
    assert.deepEqual(Object.keys(warmInfo.NetworkSettings.Networks), ['svc-warm-pool'], 'waiting on the internal pool network');
    assert.deepEqual(warmInfo.HostConfig.CapDrop, ['ALL']);

    const a = await tenants.add();
    const env = await a.client.createEnvironment({ name: 'warm', template_id: 'default' });
    assert.equal(env.status, 'running');
    const row = await t.deps.store.environments.findAny(env.id);
    assert.equal(row?.workload, pooled!.workload, 'the pooled container');
    const info = await docker.getContainer(pooled!.workload).inspect();
    assert.deepEqual(Object.keys(info.NetworkSettings.Networks), [`tenant-${a.id}`]);
    assert.equal((await a.client.exec(env.id, { command: ['sh', '-c', 'echo /workspace/*'] })).stdout, '/workspace/*\n', 'an empty workspace');
    assert.equal((await a.client.exec(env.id, { command: ['pwd'] })).stdout, '/workspace\n');

    // Stop and start keep it working from the pooled container; delete removes it.
    await a.client.stopEnvironment(env.id);
    await a.client.startEnvironment(env.id);
    assert.equal((await a.client.exec(env.id, { command: ['true'] })).exit_code, 0);

    await waitFor('the pool to refill', async () => ((await ready('default')).length === 1 ? true : undefined), 60_000);
    const [b, c] = [await tenants.add(), await tenants.add()];
    const both = await Promise.all([b, c].map((x) => x.client.createEnvironment({ name: 'race', template_id: 'default' })));
    const rows = await Promise.all(both.map((e) => t.deps.store.environments.findAny(e.id)));
    const workloads = rows.map((r) => r?.workload ?? `own:${r?.id}`);
    assert.equal(new Set(workloads).size, 2, 'two containers');
    assert.equal(rows.filter((r) => r?.workload).length, 1, 'one from the pool (size 1), one started for it');

    await a.client.deleteEnvironment(env.id);
    await assert.rejects(docker.getContainer(pooled!.workload).inspect(), /no such container/i);
  });

  test("a tenant that took one gets the next kept on its own network from its start: its next create moves nothing; another tenant never gets it; suspended, it goes, and the tenant's network with it", async () => {
    const keptFor = async (tenantId: string, not?: string) => {
      const r = (await t.deps.store.warmPool.all()).find((w) => w.tenant_id === tenantId);
      return r?.status === 'kept' && r.workload !== not ? r : undefined;
    };
    const workloadOf = async (id: string) => (await t.deps.store.environments.findAny(id))?.workload;
    const networksOf = async (name: string) => Object.keys((await docker.getContainer(name).inspect()).NetworkSettings.Networks);
    const poolFull = () => waitFor('the pool to fill', async () => ((await ready('default')).length === 1 ? true : undefined), 120_000);

    await poolFull();
    const a = await tenants.add();
    const first = await a.client.createEnvironment({ name: 'first', template_id: 'default' });
    const kept = await waitFor('a container kept for the tenant', () => keptFor(a.id), 120_000);
    assert.deepEqual(await networksOf(kept.workload), [`tenant-${a.id}`], 'on its network from its start, never on the pool network');
    assert.equal((await docker.getContainer(kept.workload).inspect()).Config.Labels['svc.tenant'], 'warm-pool', "the pool's until taken");

    await poolFull();
    const b = await tenants.add();
    const other = await b.client.createEnvironment({ name: 'other', template_id: 'default' });
    assert.notEqual(await workloadOf(other.id), kept.workload, 'never one kept for another tenant');

    const second = await a.client.createEnvironment({ name: 'second', template_id: 'default' });
    assert.equal(await workloadOf(second.id), kept.workload, 'the one kept for it');
    assert.deepEqual(await networksOf(kept.workload), [`tenant-${a.id}`]);
    assert.equal((await a.client.exec(second.id, { command: ['sh', '-c', 'echo /workspace/*'] })).stdout, '/workspace/*\n', 'an empty workspace');
    assert.equal((await a.client.exec(second.id, { command: ['pwd'] })).stdout, '/workspace\n');

    // The next is kept for it; with its environments gone and the tenant suspended, it goes, and
    // the tenant's network with it (nothing else of the tenant is on it).
    const next = await waitFor('the next kept for the tenant', () => keptFor(a.id, kept.workload), 120_000);
    await a.client.deleteEnvironment(first.id);
    await a.client.deleteEnvironment(second.id);
    assert.deepEqual(await networksOf(next.workload), [`tenant-${a.id}`], 'the network stays while the kept one is on it');
    await a.client.suspendTenant();
    const gone = (name: string) => docker.getContainer(name).inspect().then(() => false, () => true);
    await waitFor('the kept one to go', async () => (!(await t.deps.store.warmPool.all()).some((w) => w.tenant_id === a.id) && (await gone(next.workload)) ? true : undefined), 60_000);
    await waitFor("the tenant's network to go", async () => ((await docker.listNetworks({ filters: { name: [`tenant-${a.id}`] } })).some((n) => n.Name === `tenant-${a.id}`) ? undefined : true), 30_000);
  });
});
