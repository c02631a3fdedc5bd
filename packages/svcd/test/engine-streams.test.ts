// The engine's stream formats as svcd reads them: frames and progress lines, one at a time.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, test } from 'node:test';
import { consumeProgress, OutputDemuxer, PROGRESS_LINE_MAX_BYTES, type ProgressEvent } from '../src/runtime/docker/engine-streams.js';
import { execStartFailure } from '../src/runtime/docker/docker-runtime.js';
import { DockerRuntime, ExecNotStartedError, WorkloadNotRunningError } from '../src/runtime/index.js';

function frame(type: number, payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

async function demuxed(chunks: Buffer[]): Promise<string> {
  const parts: Buffer[] = [];
  await pipeline(Readable.from(chunks), new OutputDemuxer(), new Writable({ write: (c: Buffer, _e, done) => { parts.push(c); done(); } }));
  return Buffer.concat(parts).toString();
}

describe('OutputDemuxer', () => {
  test('passes stdout and stderr payloads on in order, whatever the chunk boundaries', async () => {
    const all = Buffer.concat([frame(1, 'out one\n'), frame(2, 'err\n'), frame(1, 'out two\n')]);
    assert.equal(await demuxed([all]), 'out one\nerr\nout two\n');
    // One byte at a time: headers and payloads split everywhere.
    assert.equal(await demuxed([...all].map((b) => Buffer.from([b]))), 'out one\nerr\nout two\n');
  });

  test("a stream that is not multiplexed (a TTY container's) passes as is", async () => {
    assert.equal(await demuxed([Buffer.from('plain text output\n')]), 'plain text output\n');
  });

  test('a reader that stops reading stops the source: nothing piles up in between', async () => {
    const source = new PassThrough({ highWaterMark: 16 * 1024 });
    const demuxer = new OutputDemuxer();
    source.pipe(demuxer);
    // Nobody reads the demuxer. Write 50 MB of frames as a producer honouring write() would.
    let written = 0;
    const payload = Buffer.alloc(64 * 1024, 'x');
    while (written < 50 * 1024 * 1024 && source.write(frame(1, payload))) written += payload.length;
    assert.ok(written < 1024 * 1024, `the producer could write ${written} bytes into an unread stream`);
    // The positive side: once the reader reads, the producer may go on.
    const drained = new Promise((r) => source.once('drain', r));
    demuxer.resume();
    await drained;
    source.destroy();
    demuxer.destroy();
  });
});

describe('consumeProgress', () => {
  test('hands each event over as it arrives and rejects with the first error the engine reported', async () => {
    const events: ProgressEvent[] = [];
    const stream = new PassThrough();
    const done = consumeProgress(stream, (e) => events.push(e));
    stream.write('{"status":"Pulling fs layer","id":"a"}\n{"stream":"Step 1/2\\n"}\n');
    await new Promise((r) => setImmediate(r));
    assert.equal(events.length, 2, 'events arrive before the stream ends');
    stream.end('{"error":"manifest unknown "}\n{"status":"after"}');
    await assert.rejects(done, /^Error: manifest unknown$/);
    assert.equal(events.at(-1)?.status, 'after');
  });

  test('a character split between two chunks arrives whole', async () => {
    const events: ProgressEvent[] = [];
    const line = Buffer.from('{"stream":"caf\u00e9 \u2713"}\n');
    const cut = line.indexOf(0xa9); // inside the two bytes of é
    await consumeProgress(Readable.from([line.subarray(0, cut), line.subarray(cut)]), (e) => events.push(e));
    assert.equal(events[0]?.stream, 'caf\u00e9 \u2713');
  });

  test('keeps nothing of the stream: 200 MB of progress leaves the heap where it was', async () => {
    const event = Buffer.from(`${JSON.stringify({ status: 'Downloading', id: 'layer', progressDetail: { current: 1, total: 2 }, pad: 'p'.repeat(900) })}\n`);
    const perChunk = Buffer.concat(Array.from({ length: 64 }, () => event));
    const chunks = Math.ceil((200 * 1024 * 1024) / perChunk.length);
    global.gc?.();
    const before = process.memoryUsage().heapUsed;
    let seen = 0;
    let peak = before;
    await consumeProgress(
      Readable.from(
        (function* () {
          for (let i = 0; i < chunks; i++) yield perChunk;
        })(),
      ),
      () => {
        if (++seen % 20_000 === 0) peak = Math.max(peak, process.memoryUsage().heapUsed);
      },
    );
    assert.equal(seen, chunks * 64);
    assert.ok(peak - before < 64 * 1024 * 1024, `the heap grew by ${((peak - before) / 1024 / 1024).toFixed(0)} MB`);
  });

  test('a line longer than the cap is refused instead of kept', async () => {
    const huge = (function* () {
      yield Buffer.from('{"stream":"');
      for (let sent = 0; sent <= PROGRESS_LINE_MAX_BYTES; sent += 64 * 1024) yield Buffer.alloc(64 * 1024, 'a');
    })();
    await assert.rejects(consumeProgress(Readable.from(huge)), /progress line over/);
  });

  test('an abort stops the read and rejects with its reason', async () => {
    const stream = new PassThrough();
    const controller = new AbortController();
    const done = consumeProgress(stream, () => {}, controller.signal);
    stream.write('{"status":"one"}\n');
    controller.abort(new Error('cancelled by the tenant'));
    await assert.rejects(done, /cancelled by the tenant/);
    assert.ok(stream.destroyed);
  });
});

describe('log reads the engine refuses', () => {
  // An HTTP server on a unix socket standing in for the Engine API: only the answer to a log
  // read matters here, and the real engine's 409 needs a container caught while it is removed.
  test("the engine's 409 (a container dead or being removed) and 404 (removed) are WorkloadNotRunningError; its 500 stays an error of its own", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-engine-'));
    const socketPath = join(dir, 'engine.sock');
    const answers: Record<string, [number, string]> = {
      removing: [409, 'can not get logs from container which is dead or marked for removal'],
      missing: [404, 'No such container: missing'],
      broken: [500, 'an engine that failed'],
    };
    const engine = createServer((req, res) => {
      const [status, message] = answers[/^\/containers\/([a-z]+)\/logs/.exec(req.url ?? '')?.[1] ?? 'broken'] ?? [500, 'unknown'];
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message }));
    });
    await new Promise<void>((resolve) => engine.listen(socketPath, resolve));
    try {
      const runtime = new DockerRuntime({ host: `unix://${socketPath}`, installation: 'test' });
      await assert.rejects(runtime.logs('removing', { tail: 10, follow: false }), WorkloadNotRunningError);
      await assert.rejects(runtime.logs('removing', { tail: 10, follow: true }), WorkloadNotRunningError);
      await assert.rejects(runtime.logs('missing', { tail: 10, follow: false }), WorkloadNotRunningError);
      await assert.rejects(runtime.logs('missing', { tail: 10, follow: true }), WorkloadNotRunningError);
      await assert.rejects(runtime.logs('broken', { tail: 10, follow: false }), (err: unknown) => !(err instanceof WorkloadNotRunningError) && (err as { statusCode?: number }).statusCode === 500);
    } finally {
      engine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('exec start failures', () => {
  // The engine's words after "OCI runtime exec failed: ", as runc and runsc wrote them.
  test('a container stopped under the exec, or a gVisor sandbox torn down while it started, is WorkloadNotRunningError', () => {
    for (const message of [
      'container 0f3c is not running',
      'exec failed: container_linux.go:380: starting container process caused: process_linux.go:99: executing setns process caused: in state stopped',
      // gVisor, the sandbox stopped by svc's disk limit during the exec (soak run of 2026-11-23).
      'executing processes for container: executing command "timeout --signal=KILL 120s dd if=/dev/zero of=/workspace/fill-7 bs=1M count=256" in sandbox: urpc method "containerManager.ExecuteAsync" failed: connection reset by peer: unknown',
      'executing processes for container: urpc method "containerManager.ExecuteAsync" failed: EOF: unknown',
    ]) assert.ok(execStartFailure(message) instanceof WorkloadNotRunningError, message);
  });

  test("the exec's own failures stay ExecNotStartedError, whatever the command says", () => {
    for (const message of [
      'exec failed: container_linux.go:380: starting container process caused: chdir to cwd ("/nope") set in config.json failed: no such file or directory: unknown',
      'executing processes for container: executing command "timeout" in sandbox: failed to find initial working directory "/nope": no such file or directory: unknown',
      'exec: "nosuch": executable file not found in $PATH: unknown',
      // The tenant's command, quoted by gVisor, cannot word its way into a 409.
      'executing processes for container: executing command "timeout --signal=KILL 60s /not running/x in state stopped urpc method \\"x\\" failed: EOF" in sandbox: failed to find initial working directory "/nope": no such file or directory: unknown',
    ]) {
      const err = execStartFailure(message);
      assert.ok(err instanceof ExecNotStartedError && !(err instanceof WorkloadNotRunningError), message);
    }
  });
});
