// The CLI's requests over node:http (src/http-transport.ts): what the client reads of an answer,
// streamed bodies, redirects and connection errors told plainly, and a command that does not load
// fetch's undici (the reason the transport exists).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { ApiError, SvcClient } from '@svc/client';
import { httpTransport, nodeHttpTransport, plainError } from '../src/http-transport.js';

const run = promisify(execFile);
const SVC = join(process.env.SVC_BIN_DIR ?? resolve(import.meta.dirname, '../../../bin'), 'svc');

/** What a stream's reader has left, as text. */
async function restOf(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  const rest: string[] = [];
  for (let r = await reader.read(); !r.done; r = await reader.read()) rest.push(new TextDecoder().decode(r.value));
  return rest.join('');
}

describe('the node:http transport', () => {
  let server: Server;
  let base = '';
  /** Lets the streamed answer's second half go. */
  let releaseStream: () => void = () => {};

  before(async () => {
    server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.pathname === '/echo') {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          res.setHeader('content-type', 'application/json');
          res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/']);
          res.setHeader('x-many', ['one', 'two']);
          res.end(JSON.stringify({ method: req.method, query: url.search, length: req.headers['content-length'] ?? null, auth: req.headers.authorization ?? null, body: Buffer.concat(chunks).toString() }));
        });
        return;
      }
      if (url.pathname === '/missing') {
        res.statusCode = 404;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ error: 'service not found' }));
        return;
      }
      if (url.pathname === '/moved') {
        res.writeHead(308, { location: 'https://elsewhere.example/v1/tenant' });
        res.end();
        return;
      }
      if (url.pathname === '/silent') return; // never answers
      if (url.pathname === '/stream') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first\n');
        releaseStream = () => res.end('second\n');
        return;
      }
      res.statusCode = 500;
      res.end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  test('status, headers, query, key and a JSON body, as fetch gives them to the client', async () => {
    const c = new SvcClient({ baseUrl: base, apiKey: 'k.1', transport: nodeHttpTransport });
    const r = await c.raw<{ method: string; query: string; length: string; auth: string; body: string }>('POST', '/echo', { body: { n: 1 }, query: { limit: 5 } });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { method: 'POST', query: '?limit=5', length: '7', auth: 'Bearer k.1', body: '{"n":1}' });
    assert.equal(r.headers.get('Content-Type'), 'application/json');
    assert.equal(r.headers.get('x-many'), 'one, two');
    assert.equal(r.headers.get('x-none'), null);
    assert.deepEqual(r.headers.getSetCookie(), ['a=1; Path=/', 'b=2; Path=/']);
    // A raw body goes as it is, with its length.
    const raw = await c.raw<{ length: string; body: string }>('POST', '/echo', { rawBody: new TextEncoder().encode('tar bytes'), headers: { 'content-type': 'application/gzip' } });
    assert.deepEqual([raw.body.length, raw.body.body], ['9', 'tar bytes']);
  });

  test("an answer other than 2xx is the API's message", async () => {
    const c = new SvcClient({ baseUrl: base, transport: nodeHttpTransport });
    await assert.rejects(c.call('GET', '/missing'), (err: unknown) => err instanceof ApiError && err.status === 404 && err.message === 'service not found');
  });

  test('a streamed answer is read as it comes, before it ends', async () => {
    const c = new SvcClient({ baseUrl: base, transport: nodeHttpTransport });
    const reader = (await c.stream('/stream')).getReader();
    const first = await reader.read();
    assert.equal(new TextDecoder().decode(first.value), 'first\n');
    releaseStream();
    assert.equal(await restOf(reader), 'second\n');
  });

  test("an answer's body is one stream however often it is asked for (a second would queue every chunk unread)", async () => {
    const answer = await nodeHttpTransport(new URL(`${base}/echo`), { method: 'GET', headers: {} });
    const body = answer.body;
    assert.ok(body);
    assert.equal(answer.body, body);
    assert.match(await new Response(body).text(), /"method":"GET"/);
  });

  test('a redirect is not followed: the error says where it points', async () => {
    const c = new SvcClient({ baseUrl: base, transport: nodeHttpTransport });
    await assert.rejects(c.call('GET', '/moved'), /answered 308, a redirect to https:\/\/elsewhere\.example\/v1\/tenant: set SVC_URL/);
  });

  test('an address nothing listens on, and a URL that is not http, are told plainly', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    await assert.rejects(new SvcClient({ baseUrl: `http://127.0.0.1:${String(port)}`, transport: nodeHttpTransport }).health(), /ECONNREFUSED 127\.0\.0\.1/);
    await assert.rejects(new SvcClient({ baseUrl: 'ftp://127.0.0.1', transport: nodeHttpTransport }).health(), /must begin with http:\/\/ or https:\/\/ \(ftp:\/\/127\.0\.0\.1\//);
    // A name with two addresses (localhost as ::1 and 127.0.0.1, where /etc/hosts has both) fails
    // with an AggregateError whose own message is empty: the CLI prints the reasons instead.
    const both = new AggregateError([new Error('connect ECONNREFUSED ::1:8080'), new Error('connect ECONNREFUSED 127.0.0.1:8080')]);
    assert.equal(both.message, '');
    const told = plainError(both, new URL('http://localhost:8080/v1/tenant'));
    assert.equal(told.message, 'http://localhost:8080: connect ECONNREFUSED ::1:8080; connect ECONNREFUSED 127.0.0.1:8080');
    const one = new Error('connect ECONNREFUSED 127.0.0.1:8080');
    assert.equal(plainError(one, new URL('http://127.0.0.1:8080')), one, 'any other error as it is');
  });

  test('an abort ends a stream being read, and a request whose signal was aborted before it went', async () => {
    const c = new SvcClient({ baseUrl: base, transport: nodeHttpTransport });
    const controller = new AbortController();
    const reader = (await c.stream('/stream', { signal: controller.signal })).getReader();
    assert.equal(new TextDecoder().decode((await reader.read()).value), 'first\n');
    // The server holds the rest until releaseStream(): only the abort can end this read.
    const next = reader.read();
    controller.abort();
    await assert.rejects(next, (err: unknown) => err instanceof Error && /aborted/i.test(err.message));
    await assert.rejects(c.call('GET', '/echo', { signal: AbortSignal.abort() }), (err: unknown) => err instanceof Error && err.name === 'AbortError');
  });

  test('an answer whose headers do not come in time ends the request; a body may take its time', async () => {
    const quick = new SvcClient({ baseUrl: base, transport: httpTransport(300) });
    await assert.rejects(quick.call('GET', '/silent'), /sent no answer in 0\.3 s/);
    // A stream whose second half comes later than its headers' timeout (1 s here: a loaded
    // machine's stall between the request and its headers must not be what this measures).
    const reader = (await new SvcClient({ baseUrl: base, transport: httpTransport(1_000) }).stream('/stream')).getReader();
    await reader.read();
    await new Promise((r) => setTimeout(r, 1_500));
    releaseStream();
    assert.equal(await restOf(reader), 'second\n');
  });

  test("an answer's body is read one way, once", async () => {
    const answer = await nodeHttpTransport(new URL(`${base}/echo`), { method: 'GET', headers: {} });
    assert.match(await answer.text(), /"method":"GET"/);
    await assert.rejects(answer.text(), /read already/);
    assert.throws(() => answer.body, /read already/);
  });

  test('a CLI command that talks to svcd loads neither undici (fetch) nor node:child_process nor node:fs/promises, and the same probe sees each when used', async () => {
    // A preload reports, as the process exits, which of the modules a command's start need not
    // pay for were loaded: fetch's undici (src/http-transport.ts), node:child_process (the bundle
    // gives commander src/child-process-on-use.ts instead) and node:fs/promises (svc env cp's).
    // A built-in counts as loaded by its public module or its internal one (what it costs to load).
    const loaded = "(m) => process.moduleLoadList.some((l) => (m === 'undici' ? l.includes(m) : l === 'NativeModule ' + m || l === 'NativeModule internal/' + m))";
    const report = `process.on('exit', () => process.stderr.write(['undici', 'child_process', 'fs/promises'].map((m) => m + ':' + (${loaded})(m)).join(' ') + '\\n'));`;
    const probe = `data:text/javascript,${encodeURIComponent(report)}`;
    const env = { PATH: process.env.PATH, SVC_URL: base, SVC_API_KEY: 'k.1', NODE_OPTIONS: `--import=${probe}` };
    // The stand-in server answers 500 to /v1/system/health: the command fails, after its request.
    const cli = await run(SVC, ['health'], { env }).then(
      () => assert.fail('svc health succeeded against a server that answers 500'),
      (err: unknown) => err as { stderr: string },
    );
    assert.match(cli.stderr, /HTTP 500/);
    assert.match(cli.stderr, /undici:false child_process:false fs\/promises:false/);
    // The positive probe: the same preload in a process that calls fetch, starts a process and
    // reads a path's details through node:fs/promises.
    const using = `require('node:child_process').spawnSync(process.execPath, ['-e', '0']); require('node:fs/promises').stat('.').then(() => fetch(${JSON.stringify(`${base}/echo`)})).then((r) => r.text())`;
    const used = await run(process.execPath, ['-e', using], { env });
    assert.match(used.stderr, /undici:true child_process:true fs\/promises:true/);
  });
});
