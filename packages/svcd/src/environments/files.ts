// The files API of environments (beyond the spec, issue 24): stat, list, read, write and remove
// files of a running environment. Everything goes through the environment's agent
// (packages/svc-init/files.go), which works inside the environment's own filesystem as its
// user: a path, `..` and links included, reaches nothing that a command run by exec could not.
// There is no engine path: the engine's archive API would read the container's layers from the
// host, and under gVisor a file written through it is not what the sandbox sees.
//
// Like exec, each call holds one of the tenant's exec slots while it runs (a download until its
// stream ends), files are capped at FILE_MAX_BYTES both ways, and each call is logged with its
// environment, path and size. Content streams through svcd with backpressure: a client that
// stops reading, or an upload that comes slowly, costs a socket buffer, never the file.
import { posix } from 'node:path';
import type { IncomingMessage } from 'node:http';
import { pipeline, Transform, type Readable, type TransformCallback } from 'node:stream';
import { FileInfo, FileList, FILE_MAX_BYTES } from '@svc/contract';
import type { Static, TSchema } from 'typebox';
import { Check } from 'typebox/value';
import { ConflictError, ForbiddenError, NotFoundError, TooLargeError, UnavailableError, ValidationError } from '../errors.js';
import { holdWhileOpen, type SessionLimits } from '../sessions/session-limits.js';
import { ByteCap } from '../streams/byte-cap.js';
import type { Platform } from '../platform.js';
import { AgentAnswerTooLarge, AgentRefusal, AgentUnreachableError, callAgent, readCapped, type AgentAddress, type AgentCall } from './agent.js';
import type { TimerHandle, Timers } from '../clock.js';
import type { Environments } from './environments.js';
import { WORKSPACE } from './workloads.js';

/** The agent stops listing at 2 MiB of entries (files.go); an answer past this is not the agent's. */
const LIST_ANSWER_MAX_BYTES = 4 * 1024 * 1024;
const INFO_ANSWER_MAX_BYTES = 64 * 1024;
/** The agent answers a metadata call at once; a read or a write's headers once the file is open, or once the upload is in. */
const ANSWER_WITHIN_MS = 15_000;
const UPLOAD_ANSWER_WITHIN_MS = 10 * 60_000;
/**
 * A download that does not move for this long is cut: a client that stopped reading (or an agent
 * that stopped sending) must not hold its exec slot for good.
 */
const DOWNLOAD_STALL_MS = 60_000;
const DEFAULT_MODE = '0644';

export interface EnvironmentFilesDeps extends Pick<Platform, 'timers' | 'log'> {
  environments: Pick<Environments, 'agentFor' | 'agentFailure'>;
  sessions: Pick<SessionLimits, 'within' | 'acquire'>;
}

export interface FileDownload {
  size: number;
  content: NodeJS.ReadableStream;
}

export class EnvironmentFiles {
  constructor(private readonly deps: EnvironmentFilesDeps) {}

  async stat(tenantId: string, id: string, path: string): Promise<FileInfo> {
    const at = absolute(path);
    const answer = await this.json(tenantId, id, at, '/files/stat', INFO_ANSWER_MAX_BYTES);
    return checked(FileInfo, answer);
  }

  async list(tenantId: string, id: string, path: string): Promise<FileList> {
    const at = absolute(path);
    const answer = await this.json(tenantId, id, at, '/files/list', LIST_ANSWER_MAX_BYTES);
    return checked(FileList, answer);
  }

  /** A regular file's content, streamed; the exec slot is held until the stream ends. */
  async read(tenantId: string, id: string, path: string): Promise<FileDownload> {
    const at = absolute(path);
    const slot = await this.deps.sessions.acquire(tenantId, 'exec');
    try {
      const answer = await this.call(tenantId, id, { method: 'GET', path: `/files/content?${query({ path: at, max_bytes: String(FILE_MAX_BYTES) })}`, headersWithinMs: ANSWER_WITHIN_MS }, at);
      const size = Number(answer.headers['content-length']);
      if (!Number.isSafeInteger(size) || size < 0 || size > FILE_MAX_BYTES) {
        answer.destroy();
        throw new UnavailableError("the environment's agent answered a read without its size");
      }
      this.deps.log.info({ environment: id, op: 'read', path: at, bytes: size }, 'environment files');
      const content = new StallGuard(this.deps.timers, DOWNLOAD_STALL_MS);
      pipeline(answer, content, () => {});
      return { size, content: holdWhileOpen(slot, content) };
    } catch (err) {
      await slot.release();
      throw err;
    }
  }

  /**
   * Writes `body` to the file at `path` whole (the agent renames it into place once it is all
   * there: a cut upload leaves the old file), creating missing directories. `declaredBytes` (the
   * request's Content-Length) past the cap is refused before anything is read.
   */
  async write(tenantId: string, id: string, path: string, mode: string | undefined, body: Readable, declaredBytes: number | undefined): Promise<FileInfo> {
    const at = absolute(path);
    if (declaredBytes !== undefined && declaredBytes > FILE_MAX_BYTES) throw tooLarge();
    const counted = new ByteCap(FILE_MAX_BYTES, tooLarge);
    // A client that goes midway ends the upload (and so the agent's request) at once. Not
    // pipeline(): at the cap the request must stay, so that the 413 can still be sent on it.
    body.pipe(counted);
    body.once('close', () => {
      if (!body.readableEnded) counted.destroy(new Error('the upload was cut by its client'));
    });
    const info = await this.deps.sessions.within(tenantId, 'exec', async () => {
      const answer = await this.call(
        tenantId,
        id,
        {
          method: 'PUT',
          path: `/files/content?${query({ path: at, mode: mode ?? DEFAULT_MODE, max_bytes: String(FILE_MAX_BYTES) })}`,
          body: counted,
          contentType: 'application/octet-stream',
          headersWithinMs: UPLOAD_ANSWER_WITHIN_MS,
        },
        at,
      ).catch((err: unknown) => {
        // The cap cut the upload: the agent saw an unfinished body and kept nothing.
        if (counted.exceeded) throw tooLarge();
        throw err;
      });
      return checked(FileInfo, await this.answerOf(tenantId, id, answer, INFO_ANSWER_MAX_BYTES, at));
    });
    this.deps.log.info({ environment: id, op: 'write', path: at, bytes: counted.bytes }, 'environment files');
    return info;
  }

  async remove(tenantId: string, id: string, path: string, recursive: boolean): Promise<void> {
    const at = absolute(path);
    await this.deps.sessions.within(tenantId, 'exec', async () => {
      const answer = await this.call(tenantId, id, { method: 'DELETE', path: `/files?${query({ path: at, recursive: String(recursive) })}`, headersWithinMs: recursive ? UPLOAD_ANSWER_WITHIN_MS : ANSWER_WITHIN_MS }, at);
      answer.resume();
    });
    this.deps.log.info({ environment: id, op: 'remove', path: at, recursive }, 'environment files');
  }

  /** A metadata call (stat, list) for `path` in an exec slot, its JSON answer read whole. */
  private json(tenantId: string, id: string, path: string, endpoint: '/files/stat' | '/files/list', max: number): Promise<unknown> {
    const call: AgentCall = { method: 'GET', path: `${endpoint}?${query({ path })}`, headersWithinMs: ANSWER_WITHIN_MS };
    return this.deps.sessions.within(tenantId, 'exec', async () => this.answerOf(tenantId, id, await this.call(tenantId, id, call, path), max, path));
  }

  /** The agent's JSON answer, read whole (capped, with a deadline); its failures as the API's errors. */
  private async answerOf(tenantId: string, id: string, answer: IncomingMessage, max: number, path: string): Promise<unknown> {
    let text: string;
    try {
      text = await readCapped(answer, max, this.deps.timers);
    } catch (err) {
      throw await this.errorOf(tenantId, id, err, path);
    }
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new UnavailableError("the environment's agent answered something that is not JSON");
    }
  }

  /** One call to the environment's agent, its refusals and failures as the API's errors. */
  private async call(tenantId: string, id: string, call: AgentCall, path: string) {
    const at: AgentAddress = await this.deps.environments.agentFor(tenantId, id);
    try {
      return await callAgent(at, call, this.deps.timers);
    } catch (err) {
      throw await this.errorOf(tenantId, id, err, path);
    }
  }

  private async errorOf(tenantId: string, id: string, err: unknown, path: string): Promise<Error> {
    if (err instanceof AgentUnreachableError) {
      this.deps.log.warn({ err, environment: id }, "the environment's agent was not reached for its files");
      return new UnavailableError("the environment's agent does not answer; try again once it runs (exec still works)");
    }
    if (err instanceof AgentRefusal) {
      // The agent's words are about the tenant's own path and request: the caller's to act on.
      switch (err.status) {
        case 404:
          return new NotFoundError(`file ${path}`);
        case 400:
          return new ValidationError(err.message);
        case 403:
          return new ForbiddenError(err.message);
        case 409:
          return new ConflictError(err.message);
        case 413:
          return tooLarge();
        default:
          return new UnavailableError(`the environment's agent answered ${err.status}`, err);
      }
    }
    if (err instanceof AgentAnswerTooLarge) return new UnavailableError("the environment's agent answered more than svc reads of one", err);
    return this.deps.environments.agentFailure(tenantId, id, err);
  }
}

/** A path in the environment: absolute, or relative to the workspace; normalized. */
export function absolute(path: string): string {
  if (path.includes('\0')) throw new ValidationError('path must not contain NUL');
  const resolved = posix.normalize(posix.isAbsolute(path) ? path : posix.join(WORKSPACE, path));
  // normalize keeps a trailing slash; the agent wants a clean path.
  return resolved.length > 1 && resolved.endsWith('/') ? resolved.slice(0, -1) : resolved;
}

function query(params: Record<string, string>): string {
  return new URLSearchParams(params).toString();
}

function tooLarge(): TooLargeError {
  return new TooLargeError(`files are at most ${FILE_MAX_BYTES / (1024 * 1024)} MiB through the files API (exec or sync for more)`);
}

function checked<S extends TSchema>(schema: S, answer: unknown): Static<S> {
  if (!Check(schema, answer)) throw new UnavailableError("the environment's agent answered something that is not file metadata");
  return answer;
}

/**
 * Passes a download on while it moves, and cuts it when no piece has gone through for `ms`. A
 * piece goes through only when the reader downstream has room (backpressure), so a client that
 * stopped reading and an agent that stopped sending both stall it.
 */
export class StallGuard extends Transform {
  private timer: TimerHandle | null = null;

  constructor(
    private readonly timers: Timers,
    private readonly ms: number,
  ) {
    super();
    this.arm();
    // Read to its end: nothing is left to stall.
    this.once('end', () => {
      this.timer?.cancel();
      this.timer = null;
    });
  }

  private arm(): void {
    this.timer?.cancel();
    this.timer = this.timers.setTimeout(() => this.destroy(new Error(`the download did not move for ${this.ms} ms`)), this.ms);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.arm();
    done(null, chunk);
  }

  /** The reader took some: progress too (after the source's end, what is left is only read). */
  override _read(size: number): void {
    if (!this.readableEnded && this.timer) this.arm();
    super._read(size);
  }

  override _destroy(err: Error | null, done: (err: Error | null) => void): void {
    this.timer?.cancel();
    done(err);
  }
}
