// Builds of a service from a git source or an uploaded archive: the tenant-facing rules. A build is a record in the
// store (queued -> running -> succeeded | failed | cancelled); the runner (runner.ts) takes queued
// builds within the tenant's concurrency and runs them.
import { Readable } from 'node:stream';
import type { Build, CreateBuildRequest, CreateBuildResponse, SourceUpload } from '@svc/contract';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import type { HeldWaits } from '../sessions/held-waits.js';
import { holdWhileOpen, type SessionLimits } from '../sessions/session-limits.js';
import type { DiskQuota } from '../disk/disk-quota.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { timeOrderedId } from '../ids.js';
import { builtImageTag } from '../services/images.js';
import type { BuildRow, Repositories } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import { checkSourceRef, type SourceCheck } from '../sources/sources.js';
import { archiveSourceUrl, type SourceUploads } from './source-uploads.js';
import type { Platform } from '../platform.js';

/** Queued builds a tenant may have waiting behind its running ones; one more is 409. */
export const BUILD_QUEUE_MAX = 10;
/**
 * How often a followed build log looks for new output (one indexed read of the store; a tenant
 * has at most a few followed streams at once).
 */
const FOLLOW_POLL_MS = 100;
/** Log chunks read from the store at once (a chunk is at most 64 KB). */
const LOG_PAGE_CHUNKS = 16;
const TRUNCATED_NOTE = '[earlier output was cut: the last 5 MB are kept]\n';

/** What GET logs answers for a build whose log retention removed (retention/rules.ts); the record stays. */
export function prunedLogNote(prunedAt: number): string {
  return `[this build's log was pruned on ${new Date(prunedAt * 1000).toISOString()}: svc keeps build logs for a limited time and for a service's newest builds only]\n`;
}

export function buildView(b: BuildRow): Build {
  return {
    id: b.id,
    service_id: b.service_id,
    status: b.status,
    source_type: b.source_type,
    source_url: b.source_url,
    source_ref: b.source_ref,
    image: b.image,
    commit_sha: b.commit_sha,
    last_error: b.last_error,
    deployment_id: b.deployment_id,
    created_at: b.created_at,
    started_at: b.started_at,
    finished_at: b.finished_at,
    duration_ms: b.duration_ms,
  };
}

/**
 * How long a build ran until `nowMs`: from its recorded start (whole seconds) when the exact
 * start is not known here (a cancel, another process's build); null if it never started.
 */
export function durationSince(b: BuildRow, nowMs: number): number | null {
  return b.started_at === null ? null : Math.max(0, nowMs - b.started_at * 1000);
}

export function isFinished(status: string): boolean {
  return status !== 'queued' && status !== 'running';
}

/** What the runner offers the tenant-facing side. */
export interface BuildExecution {
  /** Looks for queued builds to start now (instead of at the next tick). */
  kick(): void;
  /**
   * A build's record has ended (cancelled): wakes those waiting on it here, and stops it if this
   * process runs it; false when it runs elsewhere (its holder sees the store).
   */
  abort(buildId: string, why: string): boolean;
  /** A pause of a poll of the build's record, ended early when this process ends the build (Wakeups). */
  nextChange(pauseMs: number, buildId: string, signal?: AbortSignal): Promise<void>;
}

export interface BuildsOptions {
  /**
   * The operator's rules for sources (loopback only with --dev or --allow-loopback-git). The
   * runner checks again with the same function right before the clone, and only that check counts.
   */
  checkSource: SourceCheck;
  /** --build-registry: builds are tagged under it and pushed there. */
  buildRegistry: string | null;
  /** A log read holds one of the tenant's log-stream slots while it is open. */
  sessions: Pick<SessionLimits, 'acquire'>;
  /** A build makes an image the tenant's disk counts: none is queued while it is at its quota. */
  disk: Pick<DiskQuota, 'assertRoom'>;
  /** ?wait requests held open: capped per tenant and in all, ended when the server closes. */
  waits: Pick<HeldWaits, 'readOnceSettled'>;
}

/** What a Builds is built from, by name. */
export interface BuildsDeps extends BuildsOptions, Pick<Platform, 'store' | 'activity' | 'clock'> {
  execution: BuildExecution;
  /** Stores the uploaded archives, and one a build is queued for in the same request (upload). */
  uploads: Pick<SourceUploads, 'upload'>;
}

/** What a build is queued from, checked. */
interface BuildSource {
  type: 'git' | 'archive';
  url: string;
  ref: string | null;
  archiveId: string | null;
}

export class Builds implements TenantResources {
  constructor(private readonly deps: BuildsDeps) {}

  async create(tenantId: string, serviceId: string, req: CreateBuildRequest): Promise<CreateBuildResponse> {
    const source = await this.source(tenantId, serviceId, req);
    const queued = await this.deps.store.transaction((tx) => this.queue(tx, tenantId, serviceId, source));
    this.deps.execution.kick();
    return queued;
  }

  /**
   * An archive uploaded (POST .../sources, beyond the spec), and with `build` its build queued in
   * the same request: one round trip less for `svc deploy`. The build is queued in the
   * transaction that completes the stored archive, so that either both are kept or neither is (the
   * tenant's queue full: 409, and the upload is removed as any refused one).
   */
  async upload(tenantId: string, serviceId: string, body: Readable, declaredBytes: number | undefined, o: { build: boolean }): Promise<SourceUpload> {
    if (!o.build) return this.deps.uploads.upload(tenantId, serviceId, body, declaredBytes);
    let build: CreateBuildResponse | undefined;
    const archive = await this.deps.uploads.upload(tenantId, serviceId, body, declaredBytes, async (tx, stored) => {
      // The service was found and the tenant's disk checked when the upload began (the disk not
      // again here: a read outside this transaction would wait for it on SQLite).
      build = await this.queue(tx, tenantId, serviceId, { type: 'archive', url: archiveSourceUrl(stored.sha256), ref: null, archiveId: stored.id });
    });
    this.deps.execution.kick();
    return { ...archive, build };
  }

  /** Queues a build of `source` within `tx`, under the tenant's queue limit. */
  private async queue(tx: Repositories, tenantId: string, serviceId: string, source: BuildSource): Promise<CreateBuildResponse> {
    const id = timeOrderedId(this.deps.clock.now());
    const image = builtImageTag(this.deps.buildRegistry, tenantId, serviceId, id);
    // Held to commit: concurrent requests of this tenant count the queue one after another.
    await tx.tenants.lockForQuota(tenantId);
    // A suspension (which cancels the queued builds) may have come while the request ran (an
    // upload may take minutes): read under the lock, which waits for it.
    if ((await tx.tenants.findById(tenantId))?.status !== 'active') throw new ConflictError('the tenant was suspended: no build is queued');
    if ((await tx.builds.countWithStatus(tenantId, 'queued')) >= BUILD_QUEUE_MAX) {
      throw new ConflictError(`build queue is full (${BUILD_QUEUE_MAX} builds waiting): wait for one to finish or cancel one`);
    }
    // An archive builds once: a second build of it (or one racing this) is 409.
    if (source.archiveId !== null && !(await tx.sourceArchives.claim(source.archiveId, id))) {
      throw new ConflictError('this uploaded archive was built already: upload it again to build it again');
    }
    await tx.builds.insert({
      id,
      tenant_id: tenantId,
      service_id: serviceId,
      status: 'queued',
      source_type: source.type,
      source_url: source.url,
      source_ref: source.ref,
      source_id: source.archiveId,
      image,
      commit_sha: null,
      last_error: null,
      deployment_id: null,
      holder: null,
      lease_until_ms: null,
      log_bytes: 0,
      log_truncated: 0,
      created_at: unixSeconds(this.deps.clock),
      started_at: null,
      finished_at: null,
      duration_ms: null,
    });
    await this.deps.activity.record(tx, {
      tenantId,
      action: 'build.queued',
      resourceType: 'build',
      resourceId: id,
      serviceId,
      details: { source_url: source.url, source_ref: source.ref },
    });
    return { build_id: id, status: 'queued', image };
  }

  /**
   * What a build request builds from, checked: a git URL the operator's rules allow (the clone
   * checks again, and only that check counts), or an upload of this service no build took yet.
   */
  private async source(tenantId: string, serviceId: string, req: CreateBuildRequest): Promise<BuildSource> {
    if (req.source_type !== 'git' && req.source_type !== 'archive') throw new ValidationError('source_type must be git or archive');
    await this.deps.disk.assertRoom(tenantId);
    if (req.source_type === 'archive') {
      if (req.source_url !== undefined || req.source_ref !== undefined) throw new ValidationError('an archive build takes source_id, not source_url or source_ref');
      if (req.source_id === undefined) throw new ValidationError('body: source_id is required for an archive build (upload the archive to POST /v1/services/{id}/sources first)');
      await this.service(tenantId, serviceId);
      const archive = await this.deps.store.sourceArchives.find(tenantId, serviceId, req.source_id);
      if (!archive) throw new NotFoundError('source archive');
      if (archive.sha256 === '') throw new ConflictError('this archive is still being uploaded');
      return { type: 'archive', url: archiveSourceUrl(archive.sha256), ref: null, archiveId: archive.id };
    }
    if (req.source_id !== undefined) throw new ValidationError('a git build takes source_url, not source_id');
    if (req.source_url === undefined) throw new ValidationError('body: source_url is required for a git build');
    const ref = req.source_ref === undefined ? null : checkSourceRef(req.source_ref);
    await this.service(tenantId, serviceId);
    // Refused now with a 400; the clone checks again (the runner), and only that check counts.
    await this.deps.checkSource(req.source_url);
    // Stored and shown as the tenant sent it; git only ever gets the checked, rebuilt form.
    return { type: 'git', url: req.source_url, ref, archiveId: null };
  }

  async list(tenantId: string, serviceId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<Build[]> {
    await this.service(tenantId, serviceId);
    const rows = await this.deps.store.builds.listForService(tenantId, serviceId, Math.min(limit, PAGE_LIMIT_MAX), offset);
    return rows.map(buildView);
  }

  async listForTenant(tenantId: string, limit = PAGE_LIMIT_DEFAULT): Promise<Build[]> {
    return (await this.deps.store.builds.listForTenant(tenantId, Math.min(limit, PAGE_LIMIT_MAX))).map(buildView);
  }

  async get(tenantId: string, serviceId: string, id: string): Promise<Build> {
    return buildView(await this.row(tenantId, serviceId, id));
  }

  /**
   * The build once it has ended, or as it is after `waitMs` (?wait=N, beyond the spec): a client
   * waiting for a build is answered when it ends, not at its next poll (HeldWaits).
   */
  getOnceFinished(tenantId: string, serviceId: string, id: string, waitMs: number, gone: AbortSignal): Promise<Build> {
    return this.deps.waits.readOnceSettled(tenantId, gone, waitMs, {
      read: () => this.get(tenantId, serviceId, id),
      settled: (b) => isFinished(b.status),
      nextChange: (pauseMs, ended) => this.deps.execution.nextChange(pauseMs, id, ended),
    });
  }

  /** DELETE: a queued or running build ends cancelled at once; a finished one is 409. */
  async cancel(tenantId: string, serviceId: string, id: string): Promise<{ status: 'cancelled' }> {
    const b = await this.row(tenantId, serviceId, id);
    if (isFinished(b.status)) throw new ConflictError(`build already ${b.status}`);
    if (!(await this.end(b, 'cancelled by request'))) {
      const now = await this.row(tenantId, serviceId, id);
      throw new ConflictError(`build already ${now.status}`);
    }
    return { status: 'cancelled' };
  }

  /**
   * The build's output as text. With follow, a stream that ends when the build does; the build's
   * existence is checked here, before the route writes its 200.
   */
  async logs(tenantId: string, serviceId: string, id: string, follow: boolean): Promise<Readable> {
    const b = await this.row(tenantId, serviceId, id);
    if (b.log_pruned_at !== null) return Readable.from([prunedLogNote(b.log_pruned_at)]);
    // Followed or not, a read holds one of the tenant's log-stream slots while it is open, and
    // takes the log from the store a page at a time as the client reads it: a client that stops
    // reading holds one page, never the whole 5 MB.
    const slot = await this.deps.sessions.acquire(tenantId, 'logs');
    return holdWhileOpen(slot, Readable.from(this.readLog(b, follow)));
  }

  /** Suspension cancels every queued and running build of the tenant (spec 3, Tenant). */
  async suspend(tenantId: string): Promise<void> {
    for (const b of await this.deps.store.builds.listUnfinished({ tenantId })) await this.end(b, 'cancelled: the tenant was suspended');
  }

  count(): Promise<Record<string, number>> {
    return Promise.resolve({});
  }

  /** Cancels a build in the store and stops it where it runs; false when it had ended already. */
  private async end(b: BuildRow, why: string): Promise<boolean> {
    const nowMs = this.deps.clock.now();
    const cancelled = await this.deps.store.transaction(async (tx) => {
      const moved = await tx.builds.transition(b.id, ['queued', 'running'], {
        status: 'cancelled',
        last_error: why,
        finished_at: unixSeconds(this.deps.clock),
        duration_ms: durationSince(b, nowMs),
      });
      if (moved) {
        await this.deps.activity.record(tx, { tenantId: b.tenant_id, action: 'build.cancelled', resourceType: 'build', resourceId: b.id, serviceId: b.service_id, details: { reason: why } });
      }
      return moved;
    });
    // A build running in another svcd sees the cancelled record within a second and stops.
    if (cancelled) this.deps.execution.abort(b.id, why);
    return cancelled;
  }

  /** The log as stored; with follow, then what is written until the build ends (polled, and woken by its end). */
  private async *readLog(b: BuildRow, follow: boolean): AsyncGenerator<string> {
    let seq = 0;
    if (b.log_truncated) yield TRUNCATED_NOTE;
    for (;;) {
      // Status first, then output: output written before the build ended is never missed.
      const now = follow ? await this.deps.store.builds.findAny(b.id) : b;
      for (;;) {
        const page = await this.deps.store.builds.logChunks(b.id, seq, LOG_PAGE_CHUNKS);
        for (const c of page) {
          seq = c.seq;
          yield c.chunk;
        }
        if (page.length < LOG_PAGE_CHUNKS) break;
      }
      if (!follow || !now || isFinished(now.status)) return;
      // Ended early when this svcd's runner ends the build: the follower's stream ends with it.
      await this.deps.execution.nextChange(FOLLOW_POLL_MS, b.id);
    }
  }

  private async service(tenantId: string, serviceId: string): Promise<void> {
    if (!(await this.deps.store.services.find(tenantId, serviceId))) throw new NotFoundError('service');
  }

  private async row(tenantId: string, serviceId: string, id: string): Promise<BuildRow> {
    const b = await this.deps.store.builds.find(tenantId, serviceId, id);
    if (!b) throw new NotFoundError('build');
    return b;
  }
}
