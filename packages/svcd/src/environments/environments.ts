// Developer environments: a leased, long-running container per environment from a template's
// image, hardened like every workload, with a workspace volume at /workspace. Commands run in it
// through the engine's exec (exec), repositories are cloned into it (sync), and its ports are
// reached through svc's proxy (previews). At lease expiry it is stopped and marked `expired`;
// its workspace is kept 24 hours, during which extending the lease and starting revive it.
import type {
  CreateEnvironmentRequest,
  CreatePreviewRequest,
  Environment,
  ExecRequest,
  ExecResult,
  Preview,
  SyncRequest,
  SyncResult,
  Template,
  TemplateId,
} from '@svc/contract';
import { EXEC_OUTPUT_MAX_BYTES, EXEC_TIMEOUT_DEFAULT_S, LEASE_DEFAULT_S, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { pack } from 'tar-fs';
import { CloneError, cloneAt } from '../sources/git.js';
import { checkSourceRef, checkSourceUrl, resolveWithSystem, type CheckedSource, type ResolveHost } from '../sources/sources.js';
import { unixSeconds } from '../clock.js';
import type { SessionLimits } from '../sessions/session-limits.js';
import type { ScratchSpace } from '../scratch/scratch-space.js';
import type { DiskOverrunHalt, DiskQuota } from '../disk/disk-quota.js';
import { ConflictError, NotFoundError, QuotaExceededError, ServerBusyError, UnavailableError, UnprocessableError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import { ExecNotStartedError, WorkloadNotRunningError, engineAnswers, isEngineFault, type ExecOutcome, type ExecSpec } from '../runtime/index.js';
import { isUniqueViolation, type EnvironmentRow, type PreviewRow, type Repositories } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import { claimHostName, previewHostLabel } from '../services/dns-labels.js';
import { previewUrl, type PreviewRouting } from './previews.js';
import { ENVIRONMENT_RESOURCES, isTemplateId, templateList } from './templates.js';
import type { ClaimedWorkload, WarmPool } from './warm-pool.js';
import type { Platform } from '../platform.js';

export interface EnvironmentsOptions {
  images: Record<TemplateId, string>;
  sandbox: () => Promise<boolean>;
  /** Scratch space for sync's clones. */
  scratch: ScratchSpace;
  /** Sync may clone from loopback hosts (--dev, --allow-loopback-git). */
  allowLoopbackGit: boolean;
  /** CA bundle for HTTPS git (system + --git-ca-file), or null for the system's. */
  gitCaBundle: string | null;
  resolveHost?: ResolveHost;
  routing: PreviewRouting;
  /** Previews moved (created, deleted, their environment started or stopped): re-push routes. */
  routesChanged: () => void;
  /** An exec or a sync holds one of the tenant's slots of its kind while it runs. */
  sessions: Pick<SessionLimits, 'within'>;
  /** New environments are refused while the tenant is at its disk quota. */
  disk: Pick<DiskQuota, 'assertRoom'>;
}

export const WORKSPACE = '/workspace';
/** Expired environments keep their workspace this long (DECISIONS.md). */
export const EXPIRED_RETENTION_S = 24 * 3600;
export const PREVIEWS_PER_ENVIRONMENT = 10;
const SYNC_MAX_BYTES = 500 * 1024 * 1024;
const SYNC_TIMEOUT_MS = 10 * 60_000;
/** How long after its container stopped a running environment is judged stopped outside svc. */
const OUTSIDE_STOP_GRACE_MS = 30_000;
const STOP_TIMEOUT_S = 5;
/** A started environment container runs with an address at once; past this, something is wrong with the engine. */
const ENVIRONMENT_READY_TIMEOUT_MS = 60_000;
const ENVIRONMENT_READY_POLL_MS = 25;
/**
 * A creation holds a lease in the store from the transaction that inserts its record on,
 * renewed while it runs: when its svcd dies, another svcd's reconcile finishes the creation this
 * long after the last renewal.
 */
export const CREATE_LEASE_MS = 30_000;
const CREATE_RENEW_MS = 10_000;

function creationLease(id: string): string {
  return `environment.create:${id}`;
}

/** A creation attempt's hold on its lease (holdCreation). */
interface Creation {
  signal: AbortSignal;
  /** Runs `fn` in a transaction that first renews the lease; null (nothing written) when it is lost. */
  fenced<T>(fn: (tx: Repositories) => Promise<T>): Promise<T | null>;
  release(): Promise<void>;
}


export function environmentWorkloadName(id: string): string {
  return `svc-env-${id}`;
}

/** The container and volume an environment runs on: its own, or the warm one it was handed. */
export function workloadOf(e: Pick<EnvironmentRow, 'id' | 'workload'>): string {
  return e.workload ?? environmentWorkloadName(e.id);
}

/** What a Environments is built from, by name. */
export interface EnvironmentsDeps extends EnvironmentsOptions, Pick<Platform, 'store' | 'runtime' | 'activity' | 'clock' | 'timers' | 'log' | 'holder'> {}

export class Environments implements TenantResources, DiskOverrunHalt {
  private warmPool: WarmPool | null = null;

  constructor(private readonly deps: EnvironmentsDeps) {}

  /** Creates take a warm container from this pool when it has one of the template. */
  useWarmPool(pool: WarmPool): void {
    this.warmPool = pool;
  }

  templates(): Template[] {
    return templateList(this.deps.images);
  }

  template(id: string): Template {
    const t = this.templates().find((x) => x.id === id);
    if (!t) throw new NotFoundError('template');
    return t;
  }

  /** Synchronous: answers once the environment runs (at once when the warm pool has one). */
  async create(tenantId: string, req: CreateEnvironmentRequest): Promise<Environment> {
    if (!isTemplateId(req.template_id)) throw new ValidationError('template_id must be one of default, node, python, go');
    await this.deps.disk.assertRoom(tenantId);
    const tenant = await this.deps.store.tenants.findById(tenantId);
    if (!tenant) throw new NotFoundError('tenant');
    const now = unixSeconds(this.deps.clock);
    const row: EnvironmentRow = {
      id: hexId(12),
      tenant_id: tenantId,
      name: req.name,
      template_id: req.template_id,
      image: this.deps.images[req.template_id],
      status: 'creating',
      lease_expires_at: now + (req.lease_duration_seconds ?? LEASE_DEFAULT_S),
      expired_at: null,
      container_id: null,
      address: null,
      workload: null,
      last_error: null,
      created_at: now,
      updated_at: now,
    };
    const holder = this.attemptHolder();
    try {
      await this.deps.store.transaction(async (tx) => {
        // Held to commit: concurrent creates of this tenant count one after another.
        await tx.tenants.lockForQuota(tenantId);
        if ((await tx.environments.count(tenantId)) >= tenant.max_environments) throw new QuotaExceededError(`max_environments (${tenant.max_environments})`);
        await tx.environments.insert(row);
        // With the record: no other svcd's reconcile may take a creation that has just begun.
        await tx.jobLocks.tryAcquire(creationLease(row.id), holder, this.deps.clock.now(), CREATE_LEASE_MS);
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`an environment named ${JSON.stringify(req.name)} exists`);
      throw err;
    }
    const creation = this.holdCreation(row.id, holder);
    let started: { containerId: string; address: string | null } | null = null;
    let warm: ClaimedWorkload | null = null;
    try {
      // A warm container of the template when the pool has one; else one started now.
      warm = (await this.warmPool?.claim(req.template_id, tenantId)) ?? null;
      if (warm) row.workload = warm.workload;
      started = warm ?? (await this.runContainer(environmentWorkloadName(row.id), row.image, tenantId, creation.signal));
      const patch = { status: 'running' as const, workload: row.workload, container_id: started.containerId, address: started.address, updated_at: unixSeconds(this.deps.clock) };
      const finished = await creation.fenced(async (tx) => {
        if (!(await tx.environments.finishCreating(row.id, patch))) return false;
        await this.deps.activity.record(tx, { tenantId, action: 'environment.created', resourceType: 'environment', resourceId: row.id, details: { name: req.name, template_id: req.template_id } });
        return true;
      });
      // Taken over by another svcd (this one stalled past its lease): its environment stands, and
      // what this one started is this one's to remove, by its own reference.
      if (!finished) await this.dropAttempt(started, warm);
    } catch (err) {
      // Create either gives a running environment or leaves nothing behind, while the creation is
      // still this svcd's; taken over meanwhile, it only removes what it alone started.
      const undone = await creation.fenced((tx) => tx.environments.delete(row.id, 'creating')).catch(() => null);
      if (undone) await this.removeContainerAndWorkspace(row).catch(() => {});
      else await this.dropAttempt(started, warm);
      // The engine's words name hosts and paths of the operator's machine: they go to the log.
      throw new UnavailableError('the environment could not start: the container engine failed to run the template; retry later', err);
    } finally {
      await creation.release();
    }
    return this.view(await this.row(tenantId, row.id));
  }

  /**
   * What a creation attempt that lost its lease started: removed by its own reference (a warm
   * container with its volume, which only this attempt knew of; or its container, never by the
   * name another svcd's attempt runs under).
   */
  private async dropAttempt(started: { containerId: string } | null, warm: ClaimedWorkload | null): Promise<void> {
    if (warm) {
      await this.deps.runtime.remove(warm.containerId).catch(() => {});
      await this.deps.runtime.removeVolume(warm.workload).catch(() => {});
    } else if (started) {
      await this.deps.runtime.remove(started.containerId).catch(() => {});
    }
  }

  /**
   * One attempt's hold on a creation's lease (`holder` is the attempt's own, so that two attempts
   * of one svcd never pass for each other): renewed every 10 s, and given up (the signal aborts)
   * when another svcd holds it or renewals failed for two thirds of it. Every write of the
   * attempt goes through `fenced`, which renews the lease in the write's transaction first and
   * writes nothing once it is lost: another svcd taking it over waits for that transaction.
   */
  private holdCreation(id: string, holder: string): Creation {
    const controller = new AbortController();
    const name = creationLease(id);
    let renewedAtMs = this.deps.clock.now();
    const renewal = this.deps.timers.setInterval(() => {
      const now = this.deps.clock.now();
      if (now - renewedAtMs >= (CREATE_LEASE_MS * 2) / 3) controller.abort(new Error('the creation lease could not be renewed: stopped before it lapsed'));
      if (controller.signal.aborted) return;
      void this.deps.store.jobLocks.renew(name, holder, now, CREATE_LEASE_MS).then(
        (held) => (held ? (renewedAtMs = now) : controller.abort(new Error('another svcd took this creation over'))),
        (err: unknown) => this.deps.log.warn({ err, environment: id }, 'creation lease renewal failed'),
      );
    }, CREATE_RENEW_MS);
    return {
      signal: controller.signal,
      fenced: (fn) =>
        this.deps.store.transaction(async (tx) => {
          if (!(await tx.jobLocks.renew(name, holder, this.deps.clock.now(), CREATE_LEASE_MS))) return null;
          return fn(tx);
        }),
      release: async () => {
        renewal.cancel();
        await this.deps.store.jobLocks.release(name, holder).catch(() => {});
      },
    };
  }

  async list(tenantId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<Environment[]> {
    return (await this.deps.store.environments.list(tenantId, Math.min(limit, PAGE_LIMIT_MAX), offset)).map((e) => this.view(e));
  }

  async get(tenantId: string, id: string): Promise<Environment> {
    return this.view(await this.row(tenantId, id));
  }

  async delete(tenantId: string, id: string): Promise<void> {
    const e = await this.row(tenantId, id);
    await this.deps.store.transaction(async (tx) => {
      if (!(await tx.environments.delete(id))) throw new NotFoundError('environment');
      await this.deps.activity.record(tx, { tenantId, action: 'environment.deleted', resourceType: 'environment', resourceId: id, details: { name: e.name } });
    });
    await this.removeContainerAndWorkspace(e);
    this.deps.routesChanged();
  }

  /** Runs a stopped environment again (its container, or a new one on the same workspace). */
  async start(tenantId: string, id: string): Promise<Environment> {
    const e = await this.row(tenantId, id);
    if (e.status === 'running') return this.view(e);
    if (e.status === 'creating') throw new ConflictError('the environment is still being created');
    if (e.lease_expires_at <= unixSeconds(this.deps.clock)) {
      throw new ConflictError(`the lease has ended: extend it (POST /v1/environments/${id}/lease) and start again`);
    }
    const started = await this.bringUp(e);
    await this.deps.store.environments.update(id, { status: 'running', expired_at: null, container_id: started.containerId, address: started.address, last_error: null, updated_at: unixSeconds(this.deps.clock) });
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'environment.started', resourceType: 'environment', resourceId: id });
    this.deps.routesChanged();
    return this.get(tenantId, id);
  }

  async stop(tenantId: string, id: string): Promise<Environment> {
    const e = await this.row(tenantId, id);
    if (e.status === 'running') {
      await this.halt(e, 'stopped');
      await this.deps.activity.record(this.deps.store, { tenantId, action: 'environment.stopped', resourceType: 'environment', resourceId: id });
    }
    return this.get(tenantId, id);
  }

  /** The lease runs `seconds` from now; an expired environment is revived (stopped, start it). */
  async lease(tenantId: string, id: string, seconds: number): Promise<Environment> {
    const e = await this.row(tenantId, id);
    const now = unixSeconds(this.deps.clock);
    await this.deps.store.environments.update(id, {
      lease_expires_at: now + seconds,
      ...(e.status === 'expired' ? { status: 'stopped' as const, expired_at: null } : {}),
      updated_at: now,
    });
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'environment.lease_extended', resourceType: 'environment', resourceId: id, details: { lease_expires_at: now + seconds } });
    return this.get(tenantId, id);
  }

  /** Runs the command as given (no shell), in work_dir, killed at the timeout; output capped. */
  async exec(tenantId: string, id: string, req: ExecRequest): Promise<ExecResult> {
    const e = await this.running(tenantId, id);
    const workDir = req.work_dir ?? WORKSPACE;
    if (!workDir.startsWith('/')) throw new ValidationError('work_dir must be an absolute path');
    const out = await this.deps.sessions.within(tenantId, 'exec', () => this.execIn(workloadOf(e), {
      cmd: req.command,
      workDir,
      timeoutSeconds: req.timeout ?? EXEC_TIMEOUT_DEFAULT_S,
      maxOutputBytes: EXEC_OUTPUT_MAX_BYTES,
    }).catch((err: unknown) => {
      // The engine refused before anything ran: a work_dir that does not exist is the caller's.
      // (runc says "chdir to cwd", gVisor "initial working directory").
      if (err instanceof ExecNotStartedError && /chdir|cwd|working directory/i.test(err.message)) throw new ValidationError(`work_dir ${workDir} is not a directory in the environment`);
      throw err;
    }));
    this.deps.log.info({ environment: id, argv0: req.command[0], exit_code: out.exitCode, duration_ms: out.durationMs, timed_out: out.timedOut }, 'environment exec');
    return { exit_code: out.exitCode, stdout: out.stdout, stderr: out.stderr, truncated: out.truncated, timed_out: out.timedOut, duration_ms: out.durationMs };
  }

  /**
   * Makes /workspace/<repository> the given ref of the repository. svcd clones on its own host
   * (the same limits and address rules as builds) and copies the checkout in, so the template
   * image needs no git; what was in that directory before is replaced.
   */
  async sync(tenantId: string, id: string, req: SyncRequest): Promise<SyncResult> {
    const e = await this.running(tenantId, id);
    // Checked right before the clone, which connects only to the addresses this check judged.
    const source = await checkSourceUrl(req.git_url, { allowLoopback: this.deps.allowLoopbackGit, field: 'git_url', httpsOnly: true }, this.deps.resolveHost ?? resolveWithSystem);
    const ref = req.git_ref === undefined ? null : checkSourceRef(req.git_ref, 'git_ref');
    const repo = repositoryDirectory(source.url);
    return this.deps.sessions.within(tenantId, 'sync', () => this.syncInto(e, source, ref, repo, req.git_url));
  }

  private async syncInto(e: EnvironmentRow, source: CheckedSource, ref: string | null, repo: string, gitUrl: string): Promise<SyncResult> {
    const started = this.deps.clock.now();
    const area = await this.deps.scratch.reserve('sync', e.id, SYNC_MAX_BYTES);
    if (!area) throw new ServerBusyError('server busy: no scratch space for another clone right now; retry shortly', 30);
    const dir = area.dir;
    try {
      const output: string[] = [];
      const commit = await cloneAt({
        source,
        ref,
        dir,
        maxBytes: SYNC_MAX_BYTES,
        signal: AbortSignal.timeout(SYNC_TIMEOUT_MS),
        timers: this.deps.timers,
        caBundle: this.deps.gitCaBundle,
        trackAllBranches: true,
        onOutput: (line) => output.push(line),
      }).catch((err: unknown) => {
        if (err instanceof CloneError) throw new UnprocessableError(`sync failed: ${err.message}`);
        throw err;
      });
      const container = workloadOf(e);
      const target = `${WORKSPACE}/${repo}`;
      // Both steps run inside the environment (its file system may be a sandbox's view that
      // writes from outside would not reach): remove the old checkout, then unpack the new one
      // from a tar stream on stdin. rm and tar are in every template image.
      const removed = await this.execIn(container, { cmd: ['rm', '-rf', '--', target], workDir: '/', timeoutSeconds: 60, maxOutputBytes: 4096 });
      if (removed.exitCode !== 0) throw new UnprocessableError(`sync failed: could not replace ${target}: ${removed.stderr.trim()}`);
      const tar = pack(dir, { map: (h) => ({ ...h, ...(h.name === '.' ? { name: repo, mode: 0o40755 } : { name: `${repo}/${h.name}` }) }) });
      const unpacked = await this.execIn(container, {
        cmd: ['tar', '-x', '--no-same-owner', '-f', '-', '-C', WORKSPACE],
        workDir: '/',
        timeoutSeconds: 300,
        maxOutputBytes: 4096,
        stdin: tar,
      });
      if (unpacked.exitCode !== 0) throw new UnprocessableError(`sync failed: could not unpack into ${target}: ${(unpacked.stderr || unpacked.stdout).trim()}`);
      await this.deps.activity.record(this.deps.store, { tenantId: e.tenant_id, action: 'environment.synced', resourceType: 'environment', resourceId: e.id, details: { git_url: gitUrl, git_ref: ref, commit } });
      return { path: target, commit, duration_ms: this.deps.clock.now() - started };
    } finally {
      await area.release();
    }
  }

  async createPreview(tenantId: string, id: string, req: CreatePreviewRequest): Promise<Preview> {
    const e = await this.row(tenantId, id);
    const row: PreviewRow = { id: hexId(12), environment_id: id, tenant_id: tenantId, name: req.name, port: req.port, created_at: unixSeconds(this.deps.clock) };
    const host = previewHostLabel(req.name, id);
    try {
      await this.deps.store.transaction(async (tx) => {
        // Held to commit: concurrent creates of this tenant count one after another.
        await tx.tenants.lockForQuota(tenantId);
        if ((await tx.environments.previews(id)).length >= PREVIEWS_PER_ENVIRONMENT) {
          throw new ConflictError(`an environment has at most ${PREVIEWS_PER_ENVIRONMENT} previews`);
        }
        await tx.environments.insertPreview(row);
        // After the insert, so that a name the environment already uses is reported as such.
        await claimHostName(tx, { hostname: host, tenantId, kind: 'preview', resourceId: row.id, now: row.created_at }, `the host name ${JSON.stringify(host)} is taken; choose another preview name`);
        await this.deps.activity.record(tx, { tenantId, action: 'environment.preview_created', resourceType: 'environment', resourceId: id, details: { name: req.name, port: req.port } });
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`a preview named ${JSON.stringify(req.name)} exists`);
      throw err;
    }
    this.deps.routesChanged();
    return this.previewView(e, row);
  }

  async previews(tenantId: string, id: string): Promise<Preview[]> {
    const e = await this.row(tenantId, id);
    return (await this.deps.store.environments.previews(id)).map((p) => this.previewView(e, p));
  }

  async deletePreview(tenantId: string, id: string, previewId: string): Promise<void> {
    await this.row(tenantId, id);
    if (!(await this.deps.store.environments.deletePreview(id, previewId))) throw new NotFoundError('preview');
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'environment.preview_deleted', resourceType: 'environment', resourceId: id, details: { preview_id: previewId } });
    this.deps.routesChanged();
  }

  async count(tenantId: string): Promise<{ environments: number }> {
    return { environments: await this.deps.store.environments.count(tenantId) };
  }

  /** Past the tenant's hard disk limit: its running environments stop (workspaces kept), saying why. */
  async haltForDisk(tenantId: string, reason: string): Promise<number> {
    let stopped = 0;
    for (const e of await this.deps.store.environments.listForTenant(tenantId)) {
      if (e.status !== 'running') continue;
      await this.halt(e, 'stopped', reason);
      await this.deps.activity.record(this.deps.store, { tenantId, action: 'environment.stopped', resourceType: 'environment', resourceId: e.id, details: { reason } });
      stopped++;
    }
    return stopped;
  }

  /** Suspension stops every running environment of the tenant (workspaces kept). */
  async suspend(tenantId: string): Promise<void> {
    for (const e of await this.deps.store.environments.listForTenant(tenantId)) {
      if (e.status === 'running') await this.halt(e, 'stopped');
    }
  }

  /**
   * The lease reaper (every few seconds, under its store lease, so it survives restarts and
   * runs once across svcd processes): ended leases stop their environment (`expired`), and
   * workspaces expired for 24 hours are removed with their environment.
   */
  async reap(): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    for (const e of await this.deps.store.environments.leaseEnded(now)) {
      await this.halt(e, 'expired');
      await this.deps.activity.record(this.deps.store, { tenantId: e.tenant_id, action: 'environment.expired', resourceType: 'environment', resourceId: e.id });
      this.deps.log.info({ environment: e.id }, 'environment lease ended: stopped, workspace kept 24 h');
    }
    for (const e of await this.deps.store.environments.expiredBefore(now - EXPIRED_RETENTION_S)) {
      await this.deps.store.transaction(async (tx) => {
        if (!(await tx.environments.delete(e.id))) return;
        await this.deps.activity.record(tx, { tenantId: e.tenant_id, action: 'environment.removed', resourceType: 'environment', resourceId: e.id, details: { name: e.name } });
      });
      await this.removeContainerAndWorkspace(e);
      this.deps.routesChanged();
    }
  }

  /**
   * Records and engine together (start and every 30 s): a creation whose svcd died (its lease
   * lapsed) is finished here; an environment whose container stopped behind svc's back (a host
   * restart) is started again.
   */
  async reconcile(): Promise<void> {
    for (const e of await this.deps.store.environments.listAll()) {
      if (e.status === 'creating') {
        await this.finishAbandoned(e).catch((err: unknown) => this.deps.log.warn({ err, environment: e.id }, 'an abandoned environment creation could not be finished yet'));
      } else if (e.status === 'running') {
        const w = await this.deps.runtime.inspect(workloadOf(e));
        if (w?.state === 'running') {
          // Running under its name, but not the container the record names (a creation another
          // svcd took over replaced it): the record follows the engine, so previews route right.
          if (w.id !== e.container_id) await this.deps.store.environments.update(e.id, { container_id: w.id, address: w.address?.host ?? null, updated_at: unixSeconds(this.deps.clock) });
          continue;
        }
        // A stop of svc's own (stop, lease expiry, suspension, the disk limit) stops the container
        // first and then writes the status: a container that stopped just now may be one of
        // those, and the next run sees.
        if (w?.finishedAtMs && this.deps.clock.now() - w.finishedAtMs < OUTSIDE_STOP_GRACE_MS) continue;
        // One environment the engine cannot start keeps none of the others from being looked at.
        await this.restartStopped(e).catch((err: unknown) => this.deps.log.warn({ err, environment: e.id }, 'an environment stopped outside svc did not start again'));
      }
    }
  }

  /**
   * Finishes a creation whose svcd died: its lease lapsed (or it never had one: a record from
   * before leases). The tenant asked for it and was counted for it; the engine's refusal undoes
   * it as a create's would, the engine's absence leaves it for the next reconcile.
   */
  private async finishAbandoned(listed: EnvironmentRow): Promise<void> {
    // A record without a lease may be a creation of a svcd from before leases (a rolling
    // upgrade): it gets a lease's time before it counts as abandoned.
    if (unixSeconds(this.deps.clock) - listed.created_at < CREATE_LEASE_MS / 1000) return;
    const holder = this.attemptHolder();
    if (!(await this.deps.store.jobLocks.tryAcquire(creationLease(listed.id), holder, this.deps.clock.now(), CREATE_LEASE_MS))) return;
    const creation = this.holdCreation(listed.id, holder);
    try {
      const e = await this.deps.store.environments.findAny(listed.id);
      if (e?.status !== 'creating') return;
      const undo = async () => {
        if (await creation.fenced((tx) => tx.environments.delete(e.id, 'creating'))) await this.removeContainerAndWorkspace(e);
      };
      // A tenant suspended meanwhile gets no new container: the creation is undone.
      if ((await this.deps.store.tenants.findById(e.tenant_id))?.status !== 'active') {
        await undo();
        return;
      }
      let started: { containerId: string; address: string | null };
      try {
        started = await this.runContainer(environmentWorkloadName(e.id), e.image, e.tenant_id, creation.signal);
      } catch (err) {
        if (creation.signal.aborted) return;
        if (isEngineFault(err) || !(await engineAnswers(this.deps.runtime))) throw err;
        await undo();
        this.deps.log.warn({ err, environment: e.id }, 'an environment whose creation was abandoned could not start; removed');
        return;
      }
      const patch = { status: 'running' as const, container_id: started.containerId, address: started.address, updated_at: unixSeconds(this.deps.clock) };
      const finished = await creation.fenced(async (tx) => {
        if (!(await tx.environments.finishCreating(e.id, patch))) return false;
        await this.deps.activity.record(tx, { tenantId: e.tenant_id, action: 'environment.created', resourceType: 'environment', resourceId: e.id, details: { name: e.name, template_id: e.template_id, finished_by: 'reconcile' } });
        return true;
      });
      if (!finished) {
        await this.dropAttempt(started, null);
        return;
      }
      this.deps.log.warn({ environment: e.id }, 'finished an environment creation whose svcd stopped');
      this.deps.routesChanged();
    } finally {
      await creation.release();
    }
  }

  /** A lease holder of one creation attempt: this svcd's holder and a nonce. */
  private attemptHolder(): string {
    return `${this.deps.holder}/create-${hexId(4)}`;
  }

  /**
   * A running environment whose container stopped outside svc (the engine restarted, someone on
   * the host stopped it) starts again while its lease runs: its workspace is on its volume. When
   * the engine itself fails, the next reconcile tries again; anything else stops it, saying why.
   */
  private async restartStopped(listed: EnvironmentRow): Promise<void> {
    // Read again: a stop or a delete since the list is the tenant's, and wins.
    const e = await this.deps.store.environments.findAny(listed.id);
    if (e?.status !== 'running' || e.updated_at !== listed.updated_at || e.lease_expires_at <= unixSeconds(this.deps.clock)) return;
    try {
      const started = await this.bringUp(e);
      const now = await this.deps.store.environments.findAny(e.id);
      if (now?.status !== 'running' || now.updated_at !== e.updated_at) {
        // Stopped or deleted while it started: what was started goes again.
        if (now) await this.deps.runtime.stop(started.containerId, STOP_TIMEOUT_S);
        else await this.removeContainerAndWorkspace(e);
        return;
      }
      await this.deps.store.environments.update(e.id, { container_id: started.containerId, address: started.address, last_error: null, updated_at: unixSeconds(this.deps.clock) });
      this.deps.log.warn({ environment: e.id }, 'started an environment whose container stopped outside svc');
    } catch (err) {
      if (isEngineFault(err) || !(await engineAnswers(this.deps.runtime))) throw err;
      await this.deps.store.environments.update(e.id, { status: 'stopped', address: null, last_error: `the container stopped outside svc and did not start again: ${(err as Error).message}`, updated_at: unixSeconds(this.deps.clock) });
    }
    this.deps.routesChanged();
  }

  /** Starts the environment's container again, or a new one on its workspace volume when it is gone. */
  private async bringUp(e: EnvironmentRow): Promise<{ containerId: string; address: string | null }> {
    const w = await this.deps.runtime.inspect(workloadOf(e));
    if (!w) return this.runContainer(workloadOf(e), e.image, e.tenant_id);
    const endpoint = await this.deps.runtime.start(w.id);
    return { containerId: w.id, address: endpoint?.host ?? null };
  }

  /**
   * Starts an environment container with a workspace volume of the same name: on the tenant's
   * network, or (tenantId null) unassigned in the warm pool.
   */
  async runContainer(name: string, image: string, tenantId: string | null, signal: AbortSignal = new AbortController().signal): Promise<{ containerId: string; address: string | null }> {
    const applied = await this.deps.runtime.apply({
      spec: {
        name,
        image,
        env: {},
        tenantId: tenantId ?? '',
        warmPool: tenantId === null,
        kind: 'environment',
        resourceId: name,
        limits: { memoryMb: ENVIRONMENT_RESOURCES.memory_mb, cpus: ENVIRONMENT_RESOURCES.cpu_cores, pids: ENVIRONMENT_RESOURCES.pids },
        sandbox: await this.deps.sandbox(),
        // Idle until told otherwise; an init reaps what exec'd commands leave behind (svc-init, as
        // tenant code: what those commands print to the container's output is held to the log rate).
        entrypoint: ['sleep'],
        cmd: ['infinity'],
        init: true,
        tenantCode: true,
        volumes: [{ name, target: WORKSPACE }],
      },
      pull: 'missing',
      // No port: ready once it runs on its network.
      ready: { timeoutMs: ENVIRONMENT_READY_TIMEOUT_MS, everyMs: ENVIRONMENT_READY_POLL_MS, probeTimeoutMs: ENVIRONMENT_READY_TIMEOUT_MS },
      // A creation another svcd took over (this one stalled past its lease) stops here.
      signal,
    });
    return { containerId: applied.ref, address: applied.endpoint.host };
  }

  /** Stops the environment's container; `why`, when given, is its last_error from the moment it reads stopped. */
  private async halt(e: EnvironmentRow, status: 'stopped' | 'expired', why?: string): Promise<void> {
    await this.deps.runtime.stop(workloadOf(e), STOP_TIMEOUT_S);
    const now = unixSeconds(this.deps.clock);
    await this.deps.store.environments.update(e.id, { status, address: null, ...(status === 'expired' ? { expired_at: now } : {}), ...(why === undefined ? {} : { last_error: why }), updated_at: now });
    this.deps.routesChanged();
  }

  private async removeContainerAndWorkspace(e: Pick<EnvironmentRow, 'id' | 'tenant_id' | 'workload'>): Promise<void> {
    await this.deps.runtime.remove(workloadOf(e));
    await this.deps.runtime.removeVolume(workloadOf(e));
    await this.deps.runtime.releaseTenant(e.tenant_id);
  }

  /** Runs in the environment's container; one that stopped meanwhile (a stop, the disk limit) is the caller's 409. */
  private execIn(container: string, spec: ExecSpec): Promise<ExecOutcome> {
    return this.deps.runtime.exec(container, spec).catch((err: unknown) => {
      if (err instanceof WorkloadNotRunningError) throw new ConflictError('the environment stopped while the command was starting: start it first');
      throw err;
    });
  }

  private async running(tenantId: string, id: string): Promise<EnvironmentRow> {
    const e = await this.row(tenantId, id);
    if (e.status !== 'running') throw new ConflictError(`the environment is ${e.status}: start it first`);
    return e;
  }

  private view(e: EnvironmentRow): Environment {
    return {
      id: e.id,
      name: e.name,
      template_id: e.template_id,
      image: e.image,
      status: e.status,
      lease_expires_at: e.lease_expires_at,
      removal_at: e.status === 'expired' && e.expired_at !== null ? e.expired_at + EXPIRED_RETENTION_S : null,
      workspace: WORKSPACE,
      last_error: e.last_error,
      created_at: e.created_at,
      updated_at: e.updated_at,
    };
  }

  private previewView(e: EnvironmentRow, p: PreviewRow): Preview {
    return { id: p.id, environment_id: e.id, name: p.name, port: p.port, url: previewUrl(p, this.deps.routing), created_at: p.created_at };
  }

  private async row(tenantId: string, id: string): Promise<EnvironmentRow> {
    const e = await this.deps.store.environments.find(tenantId, id);
    if (!e) throw new NotFoundError('environment');
    return e;
  }
}

/** What `git clone` would name the directory: the URL's last path segment without .git. */
export function repositoryDirectory(url: string): string {
  const last = new URL(url).pathname.split('/').filter(Boolean).at(-1) ?? '';
  const name = last.replace(/\.git$/, '');
  return /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) ? name : 'repository';
}
