// Builds of a service from a git source: the tenant-facing rules. A build is a record in the
// store (queued -> running -> succeeded | failed | cancelled); the runner (runner.ts) takes queued
// builds within the tenant's concurrency and runs them.
import { Readable } from 'node:stream';
import type { Build, CreateBuildRequest, CreateBuildResponse } from '@svc/contract';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import type { Activity } from '../activity/activity.js';
import { type Clock, type Timers, unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { timeOrderedId } from '../ids.js';
import { builtImageTag } from '../services/images.js';
import type { BuildRow, Store } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import { checkSourceRef, type SourceCheck } from './sources.js';

/** Queued builds a tenant may have waiting behind its running ones; one more is 409. */
export const BUILD_QUEUE_MAX = 10;
/** How often a followed build log looks for new output. */
const FOLLOW_POLL_MS = 250;
const TRUNCATED_NOTE = '[earlier output was cut: the last 5 MB are kept]\n';

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
  /** Stops a build this process runs; false when it runs elsewhere (its holder sees the store). */
  abort(buildId: string, why: string): boolean;
}

export interface BuildsOptions {
  /**
   * The operator's rules for sources (loopback only with --dev or --allow-loopback-git). The
   * runner checks again with the same function right before the clone, and only that check counts.
   */
  checkSource: SourceCheck;
  /** --build-registry: builds are tagged under it and pushed there. */
  buildRegistry: string | null;
}

export class Builds implements TenantResources {
  constructor(
    private readonly store: Store,
    private readonly execution: BuildExecution,
    private readonly activity: Activity,
    private readonly clock: Clock,
    private readonly timers: Timers,
    private readonly opts: BuildsOptions,
  ) {}

  async create(tenantId: string, serviceId: string, req: CreateBuildRequest): Promise<CreateBuildResponse> {
    if (req.source_type !== 'git') throw new ValidationError('source_type must be git');
    const ref = req.source_ref === undefined ? null : checkSourceRef(req.source_ref);
    const service = await this.store.services.find(tenantId, serviceId);
    if (!service) throw new NotFoundError('service');
    // Refused now with a 400; the clone checks again (the runner), and only that check counts.
    await this.opts.checkSource(req.source_url);
    // Stored and shown as the tenant sent it; git only ever gets the checked, rebuilt form.
    const url = req.source_url;

    const id = timeOrderedId(this.clock.now());
    const image = builtImageTag(this.opts.buildRegistry, tenantId, serviceId, id);
    await this.store.transaction(async (tx) => {
      // Held to commit: concurrent requests of this tenant count the queue one after another.
      await tx.tenants.lockForQuota(tenantId);
      if ((await tx.builds.countWithStatus(tenantId, 'queued')) >= BUILD_QUEUE_MAX) {
        throw new ConflictError(`build queue is full (${BUILD_QUEUE_MAX} builds waiting): wait for one to finish or cancel one`);
      }
      await tx.builds.insert({
        id,
        tenant_id: tenantId,
        service_id: serviceId,
        status: 'queued',
        source_type: 'git',
        source_url: url,
        source_ref: ref,
        image,
        commit_sha: null,
        last_error: null,
        deployment_id: null,
        holder: null,
        lease_until_ms: null,
        log_bytes: 0,
        log_truncated: 0,
        created_at: unixSeconds(this.clock),
        started_at: null,
        finished_at: null,
        duration_ms: null,
      });
      await this.activity.record(tx, {
        tenantId,
        action: 'build.queued',
        resourceType: 'build',
        resourceId: id,
        serviceId,
        details: { source_url: url, source_ref: ref },
      });
    });
    this.execution.kick();
    return { build_id: id, status: 'queued', image };
  }

  async list(tenantId: string, serviceId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<Build[]> {
    await this.service(tenantId, serviceId);
    const rows = await this.store.builds.listForService(tenantId, serviceId, Math.min(limit, PAGE_LIMIT_MAX), offset);
    return rows.map(buildView);
  }

  async listForTenant(tenantId: string, limit = PAGE_LIMIT_DEFAULT): Promise<Build[]> {
    return (await this.store.builds.listForTenant(tenantId, Math.min(limit, PAGE_LIMIT_MAX))).map(buildView);
  }

  async get(tenantId: string, serviceId: string, id: string): Promise<Build> {
    return buildView(await this.row(tenantId, serviceId, id));
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
    if (!follow) {
      const chunks = await this.store.builds.logChunks(id);
      return Readable.from([(b.log_truncated ? TRUNCATED_NOTE : '') + chunks.map((c) => c.chunk).join('')]);
    }
    return Readable.from(this.followLog(b));
  }

  /** Suspension cancels every queued and running build of the tenant (spec 3, Tenant). */
  async suspend(tenantId: string): Promise<void> {
    for (const b of await this.store.builds.listUnfinished({ tenantId })) await this.end(b, 'cancelled: the tenant was suspended');
  }

  async count(): Promise<Record<string, number>> {
    return {};
  }

  /** Cancels a build in the store and stops it where it runs; false when it had ended already. */
  private async end(b: BuildRow, why: string): Promise<boolean> {
    const nowMs = this.clock.now();
    const cancelled = await this.store.transaction(async (tx) => {
      const moved = await tx.builds.transition(b.id, ['queued', 'running'], {
        status: 'cancelled',
        last_error: why,
        finished_at: unixSeconds(this.clock),
        duration_ms: durationSince(b, nowMs),
      });
      if (moved) {
        await this.activity.record(tx, { tenantId: b.tenant_id, action: 'build.cancelled', resourceType: 'build', resourceId: b.id, serviceId: b.service_id, details: { reason: why } });
      }
      return moved;
    });
    // A build running in another svcd sees the cancelled record within a second and stops.
    if (cancelled) this.execution.abort(b.id, why);
    return cancelled;
  }

  private async *followLog(b: BuildRow): AsyncGenerator<string> {
    let seq = 0;
    if (b.log_truncated) yield TRUNCATED_NOTE;
    for (;;) {
      // Status first, then output: output written before the build ended is never missed.
      const now = await this.store.builds.findAny(b.id);
      const chunks = await this.store.builds.logChunks(b.id, seq);
      for (const c of chunks) {
        seq = c.seq;
        yield c.chunk;
      }
      if (!now || isFinished(now.status)) return;
      await new Promise<void>((resolve) => this.timers.setTimeout(resolve, FOLLOW_POLL_MS));
    }
  }

  private async service(tenantId: string, serviceId: string): Promise<void> {
    if (!(await this.store.services.find(tenantId, serviceId))) throw new NotFoundError('service');
  }

  private async row(tenantId: string, serviceId: string, id: string): Promise<BuildRow> {
    const b = await this.store.builds.find(tenantId, serviceId, id);
    if (!b) throw new NotFoundError('build');
    return b;
  }
}
