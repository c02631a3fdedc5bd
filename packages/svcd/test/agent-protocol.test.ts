// Pure logic of svcd's side of the agent's protocols (environments/agent.ts, files.ts): what an
// agent answers is the tenant's to shape (its container, its processes), so nothing it sends may
// throw inside svcd, and a stalled download must not hold its slot.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, test } from 'node:test';
import { EXEC_SIGNALS, type ExecEvent } from '@svc/contract';
import { AgentEventDecoder, TERMINAL_FRAME, TerminalFrameReader, terminalFrame } from '../src/environments/agent.js';
import { StallGuard } from '../src/environments/files.js';
import { ManualClock } from './manual-clock.js';

/** Feeds lines to a decoder and answers the events it passed on and the exits it reported. */
async function decode(lines: string[]): Promise<{ events: ExecEvent[]; exits: number }> {
  let exits = 0;
  const decoder = new AgentEventDecoder(() => exits++);
  const events: ExecEvent[] = [];
  decoder.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) if (line) events.push(JSON.parse(line) as ExecEvent);
  });
  const ended = new Promise((resolve, reject) => {
    decoder.on('end', resolve);
    decoder.on('error', reject);
  });
  for (const line of lines) decoder.write(`${line}\n`);
  decoder.end();
  await ended;
  return { events, exits };
}

const b64 = (text: string) => Buffer.from(text).toString('base64');
const exit = '{"type":"exit","exit_code":0,"truncated":false,"timed_out":false,"duration_ms":3}';

describe("the agent's streamed exec", () => {
  test('output and one exit pass; lines that are not its events are skipped, not thrown', async () => {
    const { events, exits } = await decode(['null', '42', '"text"', '[]', '{"type":"stdout","data":7}', 'not json', `{"type":"stdout","data":"${b64('hi\n')}"}`, '{"type":"exit","exit_code":"zero"}', exit, `{"type":"stdout","data":"${b64('after')}"}`, exit]);
    assert.deepEqual(events, [
      { type: 'stdout', data: 'hi\n' },
      { type: 'exit', exit_code: 0, truncated: false, timed_out: false, duration_ms: 3 },
    ]);
    assert.equal(exits, 1, 'one exit, and nothing after it');
  });

  test('an answer that ends without its exit ends with an error event', async () => {
    const { events } = await decode([`{"type":"stderr","data":"${b64('partial')}"}`]);
    assert.deepEqual(events.map((e) => e.type), ['stderr', 'error']);
  });

  test('a line longer than the agent writes fails the stream, whole or in pieces', async () => {
    await assert.rejects(decode([`{"type":"stdout","data":"${'A'.repeat(100_000)}"}`]), /longer than it writes/);
    const decoder = new AgentEventDecoder(() => {});
    const failed = new Promise((resolve) => decoder.on('error', resolve));
    decoder.resume();
    for (let i = 0; i < 20; i++) decoder.write('A'.repeat(8192));
    assert.match(String(await failed), /longer than it writes/);
  });
});

describe("the agent's terminal frames", () => {
  test('output passes whole across any split, the exit code is reported, an oversized frame fails', async () => {
    let code: number | null = null;
    const reader = new TerminalFrameReader((c) => (code = c));
    const out: Buffer[] = [];
    reader.on('data', (chunk: Buffer) => out.push(chunk));
    const exitPayload = Buffer.alloc(4);
    exitPayload.writeInt32BE(-2, 0);
    const bytes = Buffer.concat([terminalFrame(TERMINAL_FRAME.data, Buffer.from('hello ')), terminalFrame(TERMINAL_FRAME.data, Buffer.from('world')), terminalFrame(TERMINAL_FRAME.exit, exitPayload)]);
    // One byte at a time: every header and payload split.
    for (const byte of bytes) reader.write(Buffer.from([byte]));
    reader.end();
    await new Promise((r) => reader.on('end', r));
    assert.equal(Buffer.concat(out).toString(), 'hello world');
    assert.equal(code, -2);

    const big = new TerminalFrameReader(() => {});
    const failed = new Promise((resolve) => big.on('error', resolve));
    const header = Buffer.alloc(5);
    header.writeUInt32BE(1024 * 1024, 1);
    big.write(header);
    assert.match(String(await failed), /larger than it writes/);
  });
});

describe('a download that stalls', () => {
  test('is cut when nothing has gone through for the stall time, and lives while it moves', async () => {
    const clock = new ManualClock();
    const guard = new StallGuard(clock, 60_000);
    const source = new PassThrough();
    source.pipe(guard);
    let failed: Error | null = null;
    guard.on('error', (err) => (failed = err));
    guard.resume();
    for (let i = 0; i < 5; i++) {
      clock.advance(50_000);
      source.write('more');
    }
    await new Promise(setImmediate);
    assert.equal(failed, null, 'moving: 250 s in pieces 50 s apart');
    clock.advance(60_001);
    await new Promise(setImmediate);
    assert.match(String(failed), /did not move/);
  });

  test('is cut when its source ended but the reader stopped with data left', async () => {
    const clock = new ManualClock();
    const guard = new StallGuard(clock, 60_000);
    let failed: Error | null = null;
    guard.on('error', (err) => (failed = err));
    // One piece past the reader's buffer, then the end: nobody reads it.
    guard.end(Buffer.alloc(20_000));
    await new Promise(setImmediate);
    clock.advance(60_001);
    await new Promise(setImmediate);
    assert.match(String(failed), /did not move/);
  });
});

describe('the signals the API offers are the ones the agent sends', () => {
  test('the contract\'s list and svc-init\'s (signal.go) name the same signals', () => {
    const goSource = readFileSync(join(import.meta.dirname, '../../svc-init/signal.go'), 'utf8');
    const table = /var signalsByName = map\[string\]syscall\.Signal\{([^}]*)\}/.exec(goSource)?.[1] ?? '';
    const inGo = [...table.matchAll(/"(SIG[A-Z0-9]+)":/g)].map((m) => m[1]);
    assert.deepEqual([...inGo].sort(), [...EXEC_SIGNALS].sort());
    // The agent's refusal names them too, as the contract's description does.
    for (const name of EXEC_SIGNALS) assert.match(goSource, new RegExp(`one of [^"]*\\b${name}\\b`));
  });
});
