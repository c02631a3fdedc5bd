// The engine's two stream formats, read the way a slow reader can afford: output frames of a
// container's logs, and the progress lines of pull, push and build.
//
// docker-modem has both (`demuxStream`, `followProgress`), but neither honours backpressure:
// `demuxStream` writes every frame whatever `write()` answers, so a client that stops reading a
// followed log makes svcd buffer the container's whole output; `followProgress` keeps every
// event until the stream ends. These two keep one frame or one line at a time.
import { Transform, type TransformCallback } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

/** stdin, stdout and stderr: the only stream types a multiplexed frame header names. */
const FRAME_STREAM_TYPES = new Set([0, 1, 2]);
const FRAME_HEADER_BYTES = 8;

/**
 * The payloads of a container's multiplexed output (stdout and stderr together), as a Transform:
 * piped, it passes the engine's pace on to the client and the client's back to the engine.
 * A stream whose first header is not a frame header (a TTY container's raw output) passes as is.
 */
export class OutputDemuxer extends Transform {
  private pending: Buffer = Buffer.alloc(0);
  /** Payload bytes still to pass on for the frame being read; null while reading a header. */
  private remaining: number | null = null;
  private raw = false;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.raw) {
      done(null, chunk);
      return;
    }
    let data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = Buffer.alloc(0);
    while (data.length > 0) {
      if (this.remaining === null) {
        if (data.length < FRAME_HEADER_BYTES) break;
        if (!FRAME_STREAM_TYPES.has(data[0] ?? -1)) {
          this.raw = true;
          this.push(data);
          done();
          return;
        }
        this.remaining = data.readUInt32BE(4);
        data = data.subarray(FRAME_HEADER_BYTES);
        continue;
      }
      const take = Math.min(this.remaining, data.length);
      if (take > 0) this.push(data.subarray(0, take));
      data = data.subarray(take);
      this.remaining -= take;
      if (this.remaining === 0) this.remaining = null;
    }
    // Only a partial header (under 8 bytes) is ever kept between chunks.
    this.pending = Buffer.from(data);
    done();
  }
}

/** One event of the engine's progress streams. */
/**
 * A log as the engine sends it (a container's or a Swarm service's), as text at the reader's pace.
 * The engine ends the stream when the log is complete (or its workload is gone); a broken
 * connection is passed on as one, so that a cut log never looks complete to the client, and a
 * reader that leaves closes the engine's stream.
 */
export function demuxedLog(raw: NodeJS.ReadableStream & { destroy(): void }): NodeJS.ReadableStream {
  const out = new OutputDemuxer();
  raw.pipe(out);
  raw.on('error', (err: Error) => out.destroy(err));
  out.on('close', () => raw.destroy());
  return out;
}

/** A short log's last lines on one line, for an error message ('' when it printed nothing). */
export async function lastLinesOf(log: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of log) text += String(chunk);
  return text.trim().split('\n').slice(-5).join(' | ').slice(0, 500);
}

export interface ProgressEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
}

/**
 * The engine writes one JSON object per line; a build step's output arrives in pieces of a few
 * KB. A line longer than this is not a progress event: the stream is refused rather than kept.
 */
export const PROGRESS_LINE_MAX_BYTES = 1024 * 1024;

export class ProgressStreamError extends Error {}

/**
 * Reads a progress stream to its end, line by line, handing each event to `onEvent`; rejects
 * with the first error the engine reported (after reading on to the end, as the engine's own
 * client does). Nothing but the current line is kept. With a signal, an abort closes the stream,
 * which stops the operation in the engine (a build's container is removed with it).
 */
export async function consumeProgress(
  stream: NodeJS.ReadableStream,
  onEvent: (event: ProgressEvent) => void = () => {},
  signal?: AbortSignal,
): Promise<void> {
  const destroy = () => (stream as NodeJS.ReadableStream & { destroy?: (err?: Error) => void }).destroy?.();
  const onAbort = () => destroy();
  signal?.addEventListener('abort', onAbort, { once: true });
  let firstError: string | null = null;
  let partial = '';
  // A character split between two chunks is joined, not mangled.
  const decoder = new StringDecoder('utf8');
  const handle = (line: string) => {
    const text = line.trim();
    if (!text) return;
    let event: ProgressEvent;
    try {
      event = JSON.parse(text) as ProgressEvent;
    } catch {
      throw new ProgressStreamError('the engine sent a progress line that is not JSON');
    }
    if (event.error && firstError === null) firstError = event.error.trim();
    onEvent(event);
  };
  try {
    for await (const chunk of stream as AsyncIterable<Buffer | string>) {
      if (signal?.aborted) break;
      partial += typeof chunk === 'string' ? chunk : decoder.write(chunk);
      let newline: number;
      while ((newline = partial.indexOf('\n')) >= 0) {
        handle(partial.slice(0, newline));
        partial = partial.slice(newline + 1);
      }
      if (partial.length > PROGRESS_LINE_MAX_BYTES) throw new ProgressStreamError(`the engine sent a progress line over ${PROGRESS_LINE_MAX_BYTES} bytes`);
    }
    if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
    handle(partial + decoder.end());
  } catch (err) {
    destroy();
    if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
    throw err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by handle() as the lines came
  if (firstError !== null) throw new Error(firstError);
}
