// Uploads of source archives to build from (issue 25, beyond the spec): the first of two steps
// of a build from a directory (`svc deploy`). The archive is checked as it arrives (sources/
// archive.ts: a bad one is refused with the reason and nothing is kept) and stored in the store
// in chunks, so that any svcd can run the build that takes it (POST builds with source_type
// archive and its id). Unused uploads expire; a build's archive is removed once the build ends.
import { createHash } from 'node:crypto';
import { PassThrough, Transform, type Readable, type TransformCallback } from 'node:stream';
import {
  SOURCE_ARCHIVE_MAX_BYTES,
  SOURCE_ARCHIVE_MAX_ENTRIES,
  SOURCE_ARCHIVE_UNUSED_TTL_SECONDS,
  SOURCE_ARCHIVES_STORED_MAX,
  SOURCE_UNPACKED_MAX_BYTES,
  type SourceArchive,
} from '@svc/contract';
import { unixSeconds } from '../clock.js';
import type { DiskQuota } from '../disk/disk-quota.js';
import { AppError, NotFoundError, QuotaExceededError, TooLargeError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import type { Platform } from '../platform.js';
import type { BaseImagePrefetch } from './base-image-prefetch.js';
import { readArchive, type ArchiveLimits } from '../sources/archive.js';
import { ByteCap } from '../streams/byte-cap.js';
import type { Repositories, SourceArchiveRow, Store } from '../store/index.js';

/** Stored chunk size: a reader (the build) holds one or a few, never the archive. */
const CHUNK_BYTES = 1024 * 1024;
/** Chunks a build reads from the store at once. */
const CHUNKS_PER_READ = 4;
export const ARCHIVE_LIMITS: ArchiveLimits = { maxUnpackedBytes: SOURCE_UNPACKED_MAX_BYTES, maxEntries: SOURCE_ARCHIVE_MAX_ENTRIES };

export function sourceArchiveView(r: SourceArchiveRow): SourceArchive {
  return {
    id: r.id,
    service_id: r.service_id,
    size_bytes: r.size_bytes,
    sha256: r.sha256,
    files: r.files,
    unpacked_bytes: r.unpacked_bytes,
    created_at: r.created_at,
    expires_at: r.created_at + SOURCE_ARCHIVE_UNUSED_TTL_SECONDS,
  };
}

/** What a build calls its archive (the build's source_url). */
export function archiveSourceUrl(sha256: string): string {
  return `archive:sha256:${sha256}`;
}

/** The stored archive's bytes, in order, a few chunks at a time. */
export async function* storedArchive(store: Pick<Store, 'sourceArchives'>, sourceId: string): AsyncGenerator<Buffer> {
  for (let seq = 0; ; ) {
    const page = await store.sourceArchives.chunks(sourceId, seq, CHUNKS_PER_READ);
    for (const c of page) {
      seq = c.seq;
      yield c.data;
    }
    if (page.length < CHUNKS_PER_READ) return;
  }
}

export interface SourceUploadsDeps extends Pick<Platform, 'store' | 'activity' | 'clock' | 'log'> {
  disk: Pick<DiskQuota, 'assertRoom'>;
  /** An upload's build most likely follows at once: its base images are pulled from the upload's start. */
  prefetch: Pick<BaseImagePrefetch, 'warm'>;
}

export class SourceUploads {
  constructor(private readonly deps: SourceUploadsDeps) {}

  /**
   * Stores the archive `body` for a build of the service. `declaredBytes` (the request's
   * Content-Length) past the cap is refused before anything is read. `alsoInTransaction` runs in
   * the transaction that makes the stored archive complete (a build that takes it: one request,
   * Builds.upload); when it throws, nothing of the upload is kept.
   */
  async upload(tenantId: string, serviceId: string, body: Readable, declaredBytes: number | undefined, alsoInTransaction?: (tx: Repositories, archive: SourceArchive) => Promise<void>): Promise<SourceArchive> {
    if (declaredBytes !== undefined && declaredBytes > SOURCE_ARCHIVE_MAX_BYTES) throw tooLarge();
    if (!(await this.deps.store.services.find(tenantId, serviceId))) throw new NotFoundError('service');
    await this.deps.disk.assertRoom(tenantId);
    const id = hexId(12);
    const now = unixSeconds(this.deps.clock);
    // The row first (its chunks refer to it), counted with the tenant's other unused uploads.
    await this.deps.store.transaction(async (tx) => {
      await tx.tenants.lockForQuota(tenantId);
      if ((await tx.sourceArchives.countStored(tenantId)) >= SOURCE_ARCHIVES_STORED_MAX) {
        throw new QuotaExceededError(
          `at most ${SOURCE_ARCHIVES_STORED_MAX} uploaded archives are kept at once (waiting for a build, or being built): wait for a build to end, or for an unused upload to expire (${SOURCE_ARCHIVE_UNUSED_TTL_SECONDS / 60} minutes after it came)`,
        );
      }
      await tx.sourceArchives.insert({ id, tenant_id: tenantId, service_id: serviceId, size_bytes: 0, sha256: '', files: 0, unpacked_bytes: 0, created_at: now });
    });
    // Once the upload is taken (within the tenant's count of stored archives), before its body
    // comes: its build most likely follows at once.
    void this.deps.prefetch.warm(tenantId, serviceId);
    const counted = new ByteCap(SOURCE_ARCHIVE_MAX_BYTES, tooLarge);
    const stored = new StoredChunks(this.deps.store, id);
    try {
      // Not pipeline(): on a refusal the request must stay open, so that the 4xx can still be sent on it.
      const checked = new PassThrough();
      body.pipe(counted).pipe(stored).pipe(checked);
      body.once('close', () => {
        if (!body.readableEnded) stored.destroy(new ValidationError('the upload was cut by its client'));
      });
      counted.once('error', (err) => stored.destroy(err));
      stored.once('error', (err) => checked.destroy(err));
      const summary = await readArchive(checked, ARCHIVE_LIMITS);
      await stored.done;
      if (!summary.hasDockerfile) throw new ValidationError('the archive has no Dockerfile at its root (a regular file named Dockerfile)');
      const sha256 = stored.sha256();
      // As stored: the view from what this upload writes, not read back.
      const archive = sourceArchiveView({ id, tenant_id: tenantId, service_id: serviceId, size_bytes: counted.bytes, sha256, files: summary.files, unpacked_bytes: summary.unpackedBytes, build_id: null, created_at: now });
      await this.deps.store.transaction(async (tx) => {
        // A build queued with it counts the tenant's queue under its quota lock, taken first as
        // that lock asks (store/tenants.ts).
        if (alsoInTransaction) await tx.tenants.lockForQuota(tenantId);
        // Its service deleted while the archive came took the row with it.
        if (!(await tx.sourceArchives.describe(id, { size_bytes: counted.bytes, sha256, files: summary.files, unpacked_bytes: summary.unpackedBytes }))) throw new NotFoundError('service');
        await this.deps.activity.record(tx, {
          tenantId,
          action: 'source.uploaded',
          resourceType: 'source_archive',
          resourceId: id,
          serviceId,
          details: { size_bytes: counted.bytes, sha256, files: summary.files },
        });
        await alsoInTransaction?.(tx, archive);
      });
      return archive;
    } catch (err) {
      body.unpipe(counted);
      stored.destroy();
      await this.deps.store.sourceArchives.delete(id).catch((e: unknown) => this.deps.log.warn({ err: e, source: id }, 'could not remove a refused upload (retention will)'));
      if (counted.exceeded) throw tooLarge();
      // Its service deleted while the archive came took the row with it, and the store refused
      // the chunks written after: as for a service that is not there.
      if (!(err instanceof AppError) && !(await this.deps.store.services.find(tenantId, serviceId).catch(() => true))) throw new NotFoundError('service');
      throw err;
    }
  }
}

function tooLarge(): TooLargeError {
  return new TooLargeError(`the archive is larger than ${SOURCE_ARCHIVE_MAX_BYTES / 1024 ** 2} MB`);
}

/**
 * Passes the upload on to the archive check while writing it to the store in chunks, with
 * backpressure (a chunk is written before more is taken), and hashing it.
 */
class StoredChunks extends Transform {
  private seq = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly hash = createHash('sha256');
  private finished!: (err?: Error) => void;
  /** Resolves once every chunk is in the store. */
  readonly done: Promise<void>;

  constructor(
    private readonly store: Pick<Store, 'sourceArchives'>,
    private readonly sourceId: string,
  ) {
    super();
    this.done = new Promise<void>((resolve, reject) => (this.finished = (err) => (err ? reject(err) : resolve())));
    this.done.catch(() => {});
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, callback: TransformCallback): void {
    this.hash.update(chunk);
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes < CHUNK_BYTES) {
      callback(null, chunk);
      return;
    }
    this.writePending().then(() => callback(null, chunk), (err: unknown) => callback(err as Error));
  }

  override _flush(callback: TransformCallback): void {
    this.writePending().then(
      () => {
        this.finished();
        callback();
      },
      (err: unknown) => {
        this.finished(err as Error);
        callback(err as Error);
      },
    );
  }

  override _destroy(err: Error | null, callback: (err: Error | null) => void): void {
    this.finished(err ?? new Error('the upload ended early'));
    callback(err);
  }

  sha256(): string {
    return this.hash.digest('hex');
  }

  private async writePending(): Promise<void> {
    if (this.pendingBytes === 0) return;
    const data = Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    await this.store.sourceArchives.appendChunk(this.sourceId, ++this.seq, data);
  }
}
