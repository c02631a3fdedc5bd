// Developer environments: a leased, long-running container per environment from a template's
// image, hardened like every workload, with a workspace volume at /workspace. Commands run in it
// through the engine's exec (exec), repositories are cloned into it (sync), and its ports are
// reached through svc's proxy (previews). At lease expiry it is stopped and marked `expired`;
// its workspace is kept 24 hours, during which extending the lease and starting revive it.
// Each request writes the record and the workload's desired state together; the workload
// controller runs, stops and removes the container (workloads.ts holds the kind's rules).
import type {
  CreateEnvironmentRequest,
  CreatePreviewRequest,
  Environment,
  ExecEvent,
  ExecRequest,
  ExecResult,
  ExecSignal,
  ExecSignalResult,
  Preview,
  SyncRequest,
  SyncResult,
  Template,
  TemplateId,
} from '@svc/contract';
import { EXEC_OUTPUT_MAX_BYTES, EXEC_TIMEOUT_DEFAULT_S, LEASE_DEFAULT_S, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { pack } from 'tar-fs';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { CloneError, cloneAt } from '../sources/git.js';
import { checkSourceRef, checkSourceUrl, resolveWithSystem, type CheckedSource, type ResolveHost } from '../sources/sources.js';
import { unixSeconds } from '../clock.js';
import { holdWhileOpen, type SessionLimits } from '../sessions/session-limits.js';
import type { ScratchSpace } from '../scratch/scratch-space.js';
import type { DiskOverrunHalt, DiskQuota } from '../disk/disk-quota.js';
import { ConflictError, NotFoundError, QuotaExceededError, ServerBusyError, UnavailableError, UnprocessableError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import { ExecNotStartedError, WorkloadNotRunningError, type Applied, type DriverCapabilities, type ExecOutcome, type ExecSpec } from '../runtime/index.js';
import { AgentEventDecoder, AgentRefusal, agentAddress, AgentUnreachableError, AgentWithoutSignalsError, CommandNotRunningError, answerDeadlineMs, signalCommand, canRunOnAgent, execThroughAgent, newAgentToken, openAgentTerminal, openExec, AgentTerminal, type AgentAddress, type TerminalSize } from './agent.js';
import { isUniqueViolation, type EnvironmentRow, type PreviewRow } from '../store/index.js';
import type { WorkloadController } from '../workloads/controller.js';
import type { TenantResources } from '../tenants/tenants.js';
import { claimHostName, previewHostLabel } from '../services/dns-labels.js';
import { previewUrl, type PreviewRouting } from './previews.js';
import { isTemplateId, templateList } from './templates.js';
import type { WarmPool } from './warm-pool.js';
import { EnvironmentWorkloads, WORKSPACE, environmentSpec, environmentWorkloadName } from './workloads.js';

export { WORKSPACE, environmentWorkloadName };
import type { Platform } from '../platform.js';
import { requireCapability } from '../workloads/capabilities.js';
import { assertPortLeft } from '../provisioning/published-ports.js';

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
  sessions: Pick<SessionLimits, 'within' | 'acquire'>;
  /** New environments are refused while the tenant is at its disk quota. */
  disk: Pick<DiskQuota, 'assertRoom'>;
  /** --swarm-ports: on a swarm, each environment's agent is published on one of them for its life. */
  publishedPorts: { from: number; to: number };
}

/** Expired environments keep their workspace this long (DECISIONS.md). */
export const EXPIRED_RETENTION_S = 24 * 3600;
export const PREVIEWS_PER_ENVIRONMENT = 10;
const SYNC_MAX_BYTES = 500 * 1024 * 1024;
/** The agent holds a streamed answer for a slow reader this long past the command's answer deadline (exec.go). */
const STREAM_WRITE_GRACE_MS = 15_000;
const SYNC_TIMEOUT_MS = 10 * 60_000;
/**
 * How long a create waits for the controller to run the environment: the image's pull (of an
 * operator's template image, on first use) and its start. Past it the creation is undone (503).
 */
const CREATE_WAIT_MS = 10 * 60_000;
/**
 * How long start waits for the controller, and stop, expiry and delete for the container to be
 * stopped or gone: they answer within the API's 30 s either way, and the controller finishes later.
 */
const START_WAIT_MS = 25_000;
const SETTLE_WAIT_MS = 10_000;

/** The container and volume an environment runs on: its own, or the warm one it was handed. */
export function workloadOf(e: Pick<EnvironmentRow, 'id' | 'workload'>): string {
  return e.workload ?? environmentWorkloadName(e.id);
}

/** The id of an environment's workload row (named like its own container, whichever it runs on). */
function workloadRowId(environmentId: string): string {
  return environmentWorkloadName(environmentId);
}

/** Rolls back a removal that found the environment in another status (its creation finished, an expired one revived). */
class RemovalRefused extends Error {}

/** What a Environments is built from, by name. */
export interface EnvironmentsDeps extends EnvironmentsOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'timers' | 'log' | 'holder'> {
  /** Carries out the records' requests (create, start, stop, delete) on the engine. */
  controller: WorkloadController;
}

export class Environments implements TenantResources, DiskOverrunHalt {
  private warmPool: WarmPool | null = null;
  private driverCapabilities: Promise<DriverCapabilities> | null = null;
  private readonly workloads: EnvironmentWorkloads;

  constructor(private readonly deps: EnvironmentsDeps) {
    this.workloads = new EnvironmentWorkloads({ ...deps, capabilities: () => this.capabilities() });
  }

  /**
   * What the driver can do, asked once: what environments use of it (an agent, an address of
   * their own, allocated ports) is the driver's kind, not its engine's moment, and asking the
   * Docker Engine costs its `info` (~30-50 ms here) on every create. An engine that does not
   * answer is asked again next time.
   */
  private capabilities(): Promise<DriverCapabilities> {
    this.driverCapabilities ??= this.deps.runtime.capabilities().catch((err: unknown) => {
      this.driverCapabilities = null;
      throw err;
    });
    return this.driverCapabilities;
  }

  /** Whether environments get an agent: the driver runs tenant code under svc-init (false while the engine does not answer). */
  agentSupported(): Promise<boolean> {
    return this.capabilities().then(
      (c) => c.agent,
      () => false,
    );
  }

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

  /**
   * Synchronous: answers once the environment runs, or (503) with nothing left behind. A warm
   * container of the template is handed over at once when the pool has one; else the workload
   * controller (of this svcd or any other) runs one, and this request waits for it.
   */
  async create(tenantId: string, req: CreateEnvironmentRequest): Promise<Environment> {
    if (!isTemplateId(req.template_id)) throw new ValidationError('template_id must be one of default, node, python, go');
    const capabilities = await this.capabilities();
    requireCapability(capabilities, 'reachableAgent', 'environments');
    // On a swarm its agent takes a port of --swarm-ports at its first run: none left, refused now.
    if (capabilities.allocatedPorts) await assertPortLeft(this.deps.store, this.deps.publishedPorts, unixSeconds(this.deps.clock));
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
      // A warm container comes with its own (taken over below).
      agent_token: (await this.agentSupported()) ? this.deps.sealer.seal(newAgentToken()) : null,
      // On a swarm: given at its first run (workloads.ts).
      published_port: null,
      node: null,
    };
    // This request's own hold on the new workload row while it looks in the warm pool: no
    // controller starts a container meanwhile. Released at once when the pool has none; lapsed
    // after a workload lease when this svcd dies, and then any svcd's controller creates it.
    const holder = `${this.deps.holder}/create-${hexId(4)}`;
    const name = workloadRowId(row.id);
    try {
      await this.deps.store.transaction(async (tx) => {
        // Held to commit: concurrent creates of this tenant count one after another.
        await tx.tenants.lockForQuota(tenantId);
        if ((await tx.environments.count(tenantId)) >= tenant.max_environments) throw new QuotaExceededError(`max_environments (${tenant.max_environments})`);
        await tx.environments.insert(row);
        const spec = environmentSpec(name);
        await tx.workloads.insertPending(
          { id: name, tenant_id: tenantId, kind: 'environment', resource_id: row.id, spec: JSON.stringify(spec) },
          now,
          { holder, untilMs: this.deps.clock.now() + this.deps.controller.leaseMs },
        );
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`an environment named ${JSON.stringify(req.name)} exists`);
      throw err;
    }
    const handedOver = await this.fromWarmPool(row, holder).catch((err: unknown) => {
      this.deps.log.warn({ err, environment: row.id }, 'the warm pool failed; a new container is started');
      return false;
    });
    if (handedOver) return this.get(tenantId, row.id);
    // Left held when this fails (the store away): it lapses, and the wait below ends in the undo.
    await this.deps.store.workloads
      .release(name, holder, 1, null, null, unixSeconds(this.deps.clock))
      .catch((err: unknown) => this.deps.log.warn({ err, environment: row.id }, 'the creation could not be handed to the controller yet'));
    this.deps.controller.kick();
    return this.awaitCreation(row.id);
  }

  /**
   * Hands a warm container of the template to the new environment: it is observed running in
   * the transaction that makes the environment running, fenced by this request's hold on the
   * workload row. False when the pool had none, or the hold was lost meanwhile (a controller
   * took the row over: the warm container goes, the controller's stands).
   */
  private async fromWarmPool(row: EnvironmentRow, holder: string): Promise<boolean> {
    const warm = await this.warmPool?.claim(row.template_id as TemplateId, row.tenant_id);
    if (!warm) return false;
    const now = unixSeconds(this.deps.clock);
    const observation = {
      observed_state: 'running' as const,
      endpoint: warm.address,
      driver_ref: warm.containerId,
      last_error: null,
      spec: JSON.stringify(environmentSpec(warm.workload)),
    };
    const handedOver = await this.deps.store
      .transaction(async (tx) => {
        if (!(await tx.workloads.observe(workloadRowId(row.id), holder, 1, observation, now))) return false;
        await tx.environments.update(row.id, { status: 'running', workload: warm.workload, container_id: warm.containerId, address: warm.address, agent_token: warm.agentToken, updated_at: now });
        await tx.warmPool.delete(warm.workload);
        await warm.keepNext(tx);
        await this.deps.activity.record(tx, { tenantId: row.tenant_id, action: 'environment.created', resourceType: 'environment', resourceId: row.id, details: { name: row.name, template_id: row.template_id } });
        return true;
      })
      .catch((err: unknown) => {
        this.deps.log.warn({ err, environment: row.id }, 'a warm environment could not be recorded as handed over; a new one is started');
        return false;
      });
    // It is on the tenant's network: given up with it when nothing else is on it.
    if (!handedOver) await this.warmPool?.removeClaimed(warm.workload, row.tenant_id).catch(() => {});
    return handedOver;
  }

  /**
   * Waits for the controller to have run the environment. Not running by then (the engine away,
   * the wait over): the creation is undone, unless it finished in the meantime.
   */
  private async awaitCreation(id: string): Promise<Environment> {
    await this.deps.controller.settled('environment', id, CREATE_WAIT_MS);
    const e = await this.deps.store.environments.findAny(id);
    if (e?.status === 'running') return this.view(e);
    const w = await this.deps.store.workloads.find('environment', id);
    if (e?.status === 'creating' && !(await this.removeWhile(e, 'creating'))) {
      const finished = await this.deps.store.environments.findAny(id);
      if (finished?.status === 'running') return this.view(finished);
    }
    // The engine's words name hosts and paths of the operator's machine: they go to the log.
    this.deps.log.warn({ environment: id, error: w?.last_error ?? null }, 'an environment could not be created');
    throw new UnavailableError('the environment could not start: the container engine failed to run the template; retry later');
  }

  async list(tenantId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<Environment[]> {
    return (await this.deps.store.environments.list(tenantId, Math.min(limit, PAGE_LIMIT_MAX), offset)).map((e) => this.view(e));
  }

  async get(tenantId: string, id: string): Promise<Environment> {
    return this.view(await this.row(tenantId, id));
  }

  /** Removes the environment: its record at once; its container and workspace with its workload. */
  async delete(tenantId: string, id: string): Promise<void> {
    const e = await this.row(tenantId, id);
    await this.deps.store.transaction(async (tx) => {
      // The workload row first, in every transaction that writes both (the controller's too):
      // two transactions then wait on each other in one order, never in a deadlock.
      await tx.workloads.request('environment', id, 'absent', unixSeconds(this.deps.clock));
      if (!(await tx.environments.delete(id, unixSeconds(this.deps.clock)))) throw new NotFoundError('environment');
      await this.deps.activity.record(tx, { tenantId, action: 'environment.deleted', resourceType: 'environment', resourceId: id, details: { name: e.name } });
    });
    this.deps.routesChanged();
    await this.deps.controller.settled('environment', id, SETTLE_WAIT_MS);
  }

  /**
   * Runs a stopped environment again (its container, or a new one on the same workspace), and
   * answers once it runs; one that did not start by then stays stopped (503, saying why), so
   * that a start never outlives its answer.
   */
  async start(tenantId: string, id: string): Promise<Environment> {
    const e = await this.row(tenantId, id);
    if (e.status === 'running') return this.view(e);
    if (e.status === 'creating') throw new ConflictError('the environment is still being created');
    if (e.lease_expires_at <= unixSeconds(this.deps.clock)) {
      throw new ConflictError(`the lease has ended: extend it (POST /v1/environments/${id}/lease) and start again`);
    }
    // A start already under way (a retried request) is waited for, not begun again.
    const w = await this.deps.store.workloads.find('environment', id);
    const pending = w?.desired_state === 'running' && w.observed_generation < w.generation ? w.generation : null;
    const generation = pending ?? (await this.deps.store.workloads.request('environment', id, 'running', unixSeconds(this.deps.clock)));
    await this.deps.controller.settled('environment', id, START_WAIT_MS);
    const now = await this.row(tenantId, id);
    if (now.status === 'running') return this.view(now);
    const outcome = await this.deps.store.workloads.find('environment', id);
    if (outcome?.observed_state === 'failed' && outcome.observed_generation === outcome.generation) {
      // It did not start (the outcome wrote why on the record).
      throw new UnavailableError(now.last_error ?? 'the environment did not start');
    }
    // Not started in time (the engine away or slow): asked to stay stopped, unless a newer request came.
    const why = 'the environment did not start in time: the container engine did not answer; start it again later';
    if (generation !== null) {
      await this.deps.store.transaction(async (tx) => {
        if ((await tx.workloads.request('environment', id, 'stopped', unixSeconds(this.deps.clock), { ifGeneration: generation })) === null) return;
        await tx.environments.update(id, { last_error: why, updated_at: unixSeconds(this.deps.clock) });
      });
      this.deps.controller.kick();
    }
    throw new UnavailableError(why);
  }

  /** Stops the environment (also one whose start is under way); answers once the container is down. */
  async stop(tenantId: string, id: string): Promise<Environment> {
    const e = await this.row(tenantId, id);
    if (await this.isUp(e)) {
      await this.halt(e, 'stopped', { action: 'environment.stopped' });
      await this.deps.controller.settled('environment', id, SETTLE_WAIT_MS);
    }
    return this.get(tenantId, id);
  }

  /** Running, or asked to run (a start under way): what a stop, the disk limit or a suspension stops. */
  private async isUp(e: EnvironmentRow): Promise<boolean> {
    if (e.status === 'running') return true;
    if (e.status === 'creating') return false;
    return (await this.deps.store.workloads.find('environment', e.id))?.desired_state === 'running';
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
    const spec = execSpecOf(req);
    const { out, via } = await this.deps.sessions.within(tenantId, 'exec', () => this.execPreferringAgent(e, spec).catch(workDirRefused(spec)));
    this.deps.log.info({ environment: id, argv0: req.command[0], exit_code: out.exitCode, duration_ms: out.durationMs, timed_out: out.timedOut, via }, 'environment exec');
    return { exit_code: out.exitCode, stdout: out.stdout, stderr: out.stderr, truncated: out.truncated, timed_out: out.timedOut, duration_ms: out.durationMs };
  }

  /**
   * exec with `stream`: answers, once the command runs, a stream of ExecEvent lines (output as it
   * comes, then its exit), under the same caps and timeout; the tenant's exec slot is held until
   * the stream ends. Through the agent, under an id that signalExec reaches it by while it runs;
   * an environment whose agent was not reached runs it through the engine's exec, whose output
   * then comes whole at the end (the log says why), and which has no id.
   */
  async execStream(tenantId: string, id: string, req: ExecRequest): Promise<{ events: NodeJS.ReadableStream; execId: string | null }> {
    const e = await this.running(tenantId, id);
    const spec = execSpecOf(req);
    const slot = await this.deps.sessions.acquire(tenantId, 'exec');
    try {
      const logExit = (exit: { exit_code: number; duration_ms: number; timed_out: boolean }, via: 'agent' | 'engine', execId: string | null) =>
        this.deps.log.info({ environment: id, argv0: req.command[0], exit_code: exit.exit_code, duration_ms: exit.duration_ms, timed_out: exit.timed_out, via, stream: true, exec_id: execId }, 'environment exec');
      const execId = hexId(12);
      const streamed = await this.streamThroughAgent(e, spec, execId, (exit) => logExit(exit, 'agent', execId)).catch(workDirRefused(spec));
      if (streamed) return { events: holdWhileOpen(slot, streamed), execId };
      const out = await this.execIn(workloadOf(e), spec).catch(workDirRefused(spec));
      const exit = { type: 'exit' as const, exit_code: out.exitCode, truncated: out.truncated, timed_out: out.timedOut, duration_ms: out.durationMs };
      logExit(exit, 'engine', null);
      const events: ExecEvent[] = [...(out.stdout ? [{ type: 'stdout' as const, data: out.stdout }] : []), ...(out.stderr ? [{ type: 'stderr' as const, data: out.stderr }] : []), exit];
      return { events: holdWhileOpen(slot, Readable.from(events.map((event) => `${JSON.stringify(event)}\n`))), execId: null };
    } catch (err) {
      await slot.release();
      throw err;
    }
  }

  /**
   * Sends a signal to the process group of a streamed exec that still runs (its id from the
   * stream's answer), through the environment's agent: any svcd can, not only the one holding
   * the stream. 404 when no command runs under the id (it ended, or it ran through the engine).
   */
  async signalExec(tenantId: string, id: string, execId: string, signal: ExecSignal): Promise<ExecSignalResult> {
    const e = await this.running(tenantId, id);
    const at = this.agentAt(e);
    if (!at) throw new NotFoundError('no command runs under this exec id');
    try {
      await signalCommand(at, execId, signal, this.deps.timers);
    } catch (err) {
      if (err instanceof CommandNotRunningError) throw new NotFoundError('no command runs under this exec id');
      if (err instanceof AgentWithoutSignalsError) throw new ConflictError("the environment's agent predates signals (it started before this svc did): delete and create the environment to have one that takes them");
      if (err instanceof AgentUnreachableError) throw new UnavailableError("the environment's agent does not answer: the signal was not sent", err);
      throw new UnavailableError("the environment's agent failed: the signal may or may not have been sent", err);
    }
    this.deps.log.info({ environment: id, exec_id: execId, signal }, 'environment exec signalled');
    return { exec_id: execId, signal, delivered: true };
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
    const area = this.deps.scratch.reserve('sync', e.id, SYNC_MAX_BYTES);
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
    const halted: string[] = [];
    for (const e of await this.deps.store.environments.listForTenant(tenantId)) {
      if (!(await this.isUp(e))) continue;
      await this.halt(e, 'stopped', { action: 'environment.stopped', details: { reason } }, reason);
      halted.push(e.id);
    }
    await Promise.all(halted.map((id) => this.deps.controller.settled('environment', id, SETTLE_WAIT_MS)));
    return halted.length;
  }

  /** Suspension stops every running environment of the tenant (workspaces kept); creations under way are undone. */
  async suspend(tenantId: string): Promise<void> {
    const environments = await this.deps.store.environments.listForTenant(tenantId);
    for (const e of environments) {
      if (await this.isUp(e)) await this.halt(e, 'stopped');
      if (e.status === 'creating' && !(await this.removeWhile(e, 'creating'))) {
        // Finished meanwhile: stopped like the others.
        const now = await this.deps.store.environments.findAny(e.id);
        if (now?.status === 'running') await this.halt(now, 'stopped');
      }
    }
    await Promise.all(environments.map((e) => this.deps.controller.settled('environment', e.id, SETTLE_WAIT_MS)));
  }

  /**
   * The lease reaper (every few seconds, under its store lease, so it survives restarts and
   * runs once across svcd processes): ended leases stop their environment (`expired`), and
   * workspaces expired for 24 hours are removed with their environment.
   */
  async reap(): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const changed: string[] = [];
    for (const e of await this.deps.store.environments.leaseEnded(now)) {
      await this.halt(e, 'expired', { action: 'environment.expired' });
      changed.push(e.id);
      this.deps.log.info({ environment: e.id }, 'environment lease ended: stopped, workspace kept 24 h');
    }
    for (const e of await this.deps.store.environments.expiredBefore(now - EXPIRED_RETENTION_S)) {
      // Only while still expired: one revived since the list (its lease extended) stays.
      if (!(await this.removeWhile(e, 'expired', { action: 'environment.removed', details: { name: e.name } }))) continue;
      changed.push(e.id);
      this.deps.routesChanged();
    }
    this.deps.controller.kick();
    // A run ends once the containers are stopped or gone (or the wait is over): the next run
    // does not find them half done.
    await Promise.all(changed.map((id) => this.deps.controller.settled('environment', id, SETTLE_WAIT_MS)));
  }

  /**
   * Removes the environment in one transaction, only while it is in `status` (a creation not
   * finished, an expired one not revived): its workload is to go (the controller removes the
   * container and the workspace), its record goes, with `entry` in the feed. False, nothing
   * written, when it is in another status by now.
   */
  private async removeWhile(e: Pick<EnvironmentRow, 'id' | 'tenant_id'>, status: EnvironmentRow['status'], entry?: { action: string; details?: Record<string, unknown> }): Promise<boolean> {
    const removed = await this.deps.store
      .transaction(async (tx) => {
        // The workload row first, as in every transaction that writes both.
        await tx.workloads.request('environment', e.id, 'absent', unixSeconds(this.deps.clock));
        if (!(await tx.environments.delete(e.id, unixSeconds(this.deps.clock), status))) throw new RemovalRefused();
        if (entry) await this.deps.activity.record(tx, { tenantId: e.tenant_id, resourceType: 'environment', resourceId: e.id, ...entry });
        return true;
      })
      .catch((err: unknown) => {
        if (err instanceof RemovalRefused) return false;
        throw err;
      });
    if (removed) this.deps.controller.kick();
    return removed;
  }

  /** Runs an unassigned environment container for the warm pool (the environment's own spec, on the pool's network or on the network of the tenant it is kept for). */
  runWarm(name: string, image: string, agentToken: string | null, keptFor: string | null, signal: AbortSignal): Promise<Applied> {
    return this.workloads.run({ name, image, tenantId: null, keptFor, resourceId: name, agentToken, signal });
  }

  /**
   * Stops the environment: its record says so (with `why`, when given, as its last_error) in the
   * transaction that asks for its workload to stop; the controller stops the container (callers
   * that answer a request wait for it).
   */
  private async halt(e: EnvironmentRow, status: 'stopped' | 'expired', entry?: { action: string; details?: Record<string, unknown> }, why?: string): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    await this.deps.store.transaction(async (tx) => {
      await tx.workloads.request('environment', e.id, 'stopped', now);
      await tx.environments.update(e.id, { status, address: null, ...(status === 'expired' ? { expired_at: now } : {}), ...(why === undefined ? {} : { last_error: why }), updated_at: now });
      if (entry) await this.deps.activity.record(tx, { tenantId: e.tenant_id, resourceType: 'environment', resourceId: e.id, ...entry });
    });
    this.deps.routesChanged();
    this.deps.controller.kick();
  }

  /**
   * Runs through the environment's agent when it has one, else (or when the agent was not
   * reached: nothing ran) through the engine's exec, saying why in the log.
   */
  private async execPreferringAgent(e: EnvironmentRow, spec: ExecSpec): Promise<{ out: ExecOutcome; via: 'agent' | 'engine' }> {
    const at = this.agentAt(e);
    if (at && canRunOnAgent(spec)) {
      try {
        return { out: await execThroughAgent(at, spec, this.deps.timers), via: 'agent' };
      } catch (err) {
        if (!(err instanceof AgentUnreachableError)) throw await this.agentFailed(e, err);
        this.deps.log.warn({ err, environment: e.id }, "the environment's agent was not reached; the command goes through the engine");
      }
    }
    return { out: await this.execIn(workloadOf(e), spec), via: 'engine' };
  }

  /**
   * The agent's streamed exec, as ExecEvent lines (null: the agent was not reached, or there is
   * none: nothing ran). The stream is cut when the command's deadline and the agent's grace
   * have passed (a client that stopped reading holds it no longer), and its end or the client's
   * leaving closes the agent's answer (the agent then kills the command).
   */
  private async streamThroughAgent(e: EnvironmentRow, spec: ExecSpec, execId: string, onExit: (exit: Extract<ExecEvent, { type: 'exit' }>) => void): Promise<NodeJS.ReadableStream | null> {
    const at = this.agentAt(e);
    if (!at || !canRunOnAgent(spec)) return null;
    let answer: IncomingMessage;
    try {
      answer = await openExec(at, spec, true, this.deps.timers, execId);
    } catch (err) {
      if (err instanceof AgentUnreachableError) {
        this.deps.log.warn({ err, environment: e.id }, "the environment's agent was not reached; the command goes through the engine, its output at the end");
        return null;
      }
      throw await this.agentFailed(e, err);
    }
    const events = new AgentEventDecoder(onExit);
    // Past the deadline the events go too (not only the answer): a client that stopped reading
    // holds them, and with them its exec slot, until they close.
    const cut = this.deps.timers.setTimeout(() => {
      answer.destroy();
      events.destroy(new Error('the command ran past its deadline and the agent\'s grace'));
    }, answerDeadlineMs(spec) + STREAM_WRITE_GRACE_MS);
    // The answer cut short (the container stopped, the deadline) ends the events with an error event.
    answer.on('error', () => {});
    answer.on('close', () => {
      if (!answer.complete) events.end();
    });
    // Only once the events are read to their end (or destroyed) is the cut no longer needed: what
    // they still hold for a client that stopped reading would hold the slot.
    events.on('close', () => {
      cut.cancel();
      answer.destroy();
    });
    answer.pipe(events);
    return events;
  }

  /**
   * Opens an interactive terminal (a login shell on a pseudo-terminal, in /workspace) in the
   * running environment, through its agent: resolves with the terminal once the shell runs. The tenant's exec slot is held until the connection closes.
   * There is no engine path: an environment whose agent does not answer is 503.
   */
  async openTerminal(tenantId: string, id: string, size: TerminalSize): Promise<AgentTerminal> {
    const at = await this.agentFor(tenantId, id);
    const slot = await this.deps.sessions.acquire(tenantId, 'exec');
    try {
      const connection = await openAgentTerminal(at, { ...size, workDir: WORKSPACE }, this.deps.timers);
      this.deps.log.info({ environment: id, ...size }, 'environment terminal opened');
      connection.once('close', () => this.deps.log.info({ environment: id }, 'environment terminal closed'));
      connection.once('close', () => void slot.release());
      return new AgentTerminal(connection);
    } catch (err) {
      await slot.release();
      if (err instanceof AgentUnreachableError) throw new UnavailableError("the environment's agent does not answer; a terminal needs it (exec still works)", err);
      // 422: the environment's own state (its /workspace gone, no shell to run): the tenant's to fix.
      if (err instanceof AgentRefusal && err.status === 422) throw new ConflictError(`the environment cannot open a terminal: ${err.message}`);
      if (err instanceof AgentRefusal) throw new UnavailableError(`the environment's agent could not open a terminal: ${err.message}`, err);
      const e = await this.row(tenantId, id);
      if (e.status !== 'running') throw new ConflictError(`the environment is ${e.status}: start it first`);
      throw new UnavailableError("the environment's agent failed while opening the terminal", err);
    }
  }

  /** The agent of a running environment of the tenant's: the files API has no other way in. */
  async agentFor(tenantId: string, id: string): Promise<AgentAddress> {
    const e = await this.running(tenantId, id);
    const at = this.agentAt(e);
    if (!at) throw new UnavailableError('this environment has no agent, which the files API needs (exec works without it)');
    return at;
  }

  /** What to answer for a call to the agent of the tenant's environment that failed after it was reached (agentFailed). */
  async agentFailure(tenantId: string, id: string, err: unknown): Promise<Error> {
    return this.agentFailed(await this.row(tenantId, id), err);
  }

  /** Where the environment's agent answers, when it has one and runs. */
  private agentAt(e: EnvironmentRow): AgentAddress | null {
    // Placed on a swarm node (`node`) without its published port now (one moving into a changed
    // range): not reachable there, and the token is never sent to the node's own AGENT_PORT.
    if (e.agent_token === null || e.address === null || (e.node !== null && e.published_port === null)) return null;
    return agentAddress(e.address, e.published_port, this.deps.sealer.open(e.agent_token));
  }

  /**
   * The error for an agent that was reached and then failed: the command may have run, so it is
   * not run again through the engine. A container that stopped under it (a stop, the disk limit)
   * is the caller's 409, as when it stops while a command starts (the record says stopped first,
   * in the request's transaction; the container follows). The agent's words stay in the log.
   */
  private async agentFailed(e: EnvironmentRow, err: unknown): Promise<Error> {
    if (err instanceof ExecNotStartedError) return err;
    const record = await this.deps.store.environments.findAny(e.id);
    const container = await this.deps.runtime.inspect(workloadOf(e)).catch(() => null);
    if (record?.status !== 'running' || container?.state !== 'running') return new ConflictError('the environment stopped while the command ran: its outcome is unknown');
    return new UnavailableError("the environment's agent failed while the command ran; its outcome is unknown", err);
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

/** The exec's spec from the request (the spec's fields and the additive env and stdin). */
function execSpecOf(req: ExecRequest): ExecSpec {
  const workDir = req.work_dir ?? WORKSPACE;
  if (!workDir.startsWith('/')) throw new ValidationError('work_dir must be an absolute path');
  return {
    cmd: req.command,
    workDir,
    timeoutSeconds: req.timeout ?? EXEC_TIMEOUT_DEFAULT_S,
    maxOutputBytes: EXEC_OUTPUT_MAX_BYTES,
    ...(req.env === undefined ? {} : { env: req.env }),
    ...(req.stdin === undefined ? {} : { stdin: Buffer.from(req.stdin, 'utf8') }),
  };
}

/**
 * The engine or the agent refused before anything ran: a work_dir that does not exist is the
 * caller's (runc says "chdir to cwd", gVisor "initial working directory", the agent as runc).
 */
function workDirRefused(spec: ExecSpec) {
  return (err: unknown): never => {
    if (err instanceof ExecNotStartedError && /chdir|cwd|working directory/i.test(err.message)) throw new ValidationError(`work_dir ${spec.workDir} is not a directory in the environment`);
    throw err;
  };
}
