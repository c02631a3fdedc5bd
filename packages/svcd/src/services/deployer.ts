// A service's deployments, under the workload controller (workloads/controller.ts). Every request
// that runs a service again (create, start, restart, redeploy, reset, a build, a crash's restart,
// reconcile) writes in one transaction the next generation of the service's workload row and a
// pending deployment of that generation (requestDeployment), with the service's own record and
// its activity entry. The controller, on whichever svcd claims the row, calls apply() here: the
// deployment turns running, the image is pulled and the container applied through the driver,
// under a 10-minute deadline; observed() writes the outcome onto the deployment and the service,
// in the controller's transaction fenced by its lease and the generation. A cancel or a newer
// request moves the generation on, which aborts the apply wherever it runs; a svcd killed in the
// middle leaves its lease to lapse, and the svcd that takes the row over records the deployment
// as interrupted and requests a new one.
import { pause, type Clock, unixSeconds } from '../clock.js';
import type { Activity } from '../activity/activity.js';
import { LABELS, probePasses, workloadLimits, type Applied, type DriverCapabilities, type SandboxPolicy, type WorkloadExit, type WorkloadInfo, type WorkloadLimits } from '../runtime/index.js';
import type { DeploymentRow, Repositories, ServiceRow, WorkloadRow } from '../store/index.js';
import { assertPortLeft, publishedPortFor, readPortFigures, type PortFigures } from '../provisioning/published-ports.js';
import { timeOrderedId } from '../ids.js';
import { ConflictError, NotFoundError } from '../errors.js';
import { Superseded, setAsideOf, type Fence, type WorkloadController, type WorkloadOutcome, type WorkloadRules, type WorkloadSpecRecord } from '../workloads/controller.js';
import { isLocallyBuilt, pullTenantImage, tenantImageRefusal } from './images.js';
import { joinUpstreams, splitUpstreams } from '../proxy/caddy.js';
import { healthCheckOf, readinessOf } from './health-checks.js';
import type { Platform } from '../platform.js';

export const DEPLOY_DEADLINE_MS = 10 * 60_000;
/** The service's last_error while the engine is away: not a fault of the tenant's code (the detail is on the deployment). */
export const ENGINE_UNAVAILABLE = 'container engine unavailable; svc deploys the service again when the engine answers';
/** A deployment whose svcd died under it: recorded so, and a new one (reason resume) runs in its place. */
export const INTERRUPTED = 'interrupted: svcd stopped during this deployment; a new one was started';
/** How long a started container has to pass its health check on its port (a TCP connect by default). */
export const READY_TIMEOUT_MS = 60_000;
/** A stopped service gets SIGTERM and this long to end before it is killed. */
const STOP_TIMEOUT_S = 10;

/**
 * What a service's workload was made with beyond its image: its limits and sandbox (a label on
 * it). A scale in place adds replicas like the running ones, so only while a deploy would make
 * the same.
 */
const SHAPE_LABEL = 'svc.shape';
function workloadShape(limits: WorkloadLimits, sandbox: boolean): string {
  return `memory=${String(limits.memoryMb)}MB cpus=${String(limits.cpus)} pids=${String(limits.pids)} sandbox=${sandbox ? 'gvisor' : 'none'}`;
}

export function workloadName(serviceId: string): string {
  return `svc-${serviceId}`;
}

/** The workload row's spec of a service: its container's name; no volumes; stopped cleanly. */
export function serviceWorkloadSpec(serviceId: string): WorkloadSpecRecord {
  return { name: workloadName(serviceId), volumes: [], stopTimeoutS: STOP_TIMEOUT_S };
}

/** A new pending deployment record of the given generation. */
export function deploymentRow(clock: Clock, d: { tenantId: string; serviceId: string; image: string; reason: string; generation: number; buildId?: string | null }): DeploymentRow {
  return {
    id: timeOrderedId(clock.now()),
    service_id: d.serviceId,
    tenant_id: d.tenantId,
    status: 'pending',
    reason: d.reason,
    image: d.image,
    // Every deploy pulls (imageToRun) but a local build's, which no registry holds.
    pull: isLocallyBuilt(d.image) ? 0 : 1,
    build_id: d.buildId ?? null,
    generation: d.generation,
    last_error: null,
    created_at: unixSeconds(clock),
    started_at: null,
    finished_at: null,
  };
}

export interface DeploymentRequest {
  tenantId: string;
  serviceId: string;
  image: string;
  reason: string;
  buildId?: string | null;
  /** Not deployed before this (ms): a crash's restart delay. */
  retryAtMs?: number;
  /** Only if the workload is still at this generation: reconcile and crash handling act on what they read, once. */
  ifGeneration?: number;
}

/**
 * Inside the caller's transaction, before it writes the service (the workload row first, in
 * every transaction that writes both, so that two of them never deadlock): the workload's next
 * generation, what was unfinished cancelled as superseded, and the pending deployment of the new
 * generation; null when the generation had moved on from `ifGeneration` (nothing is written).
 */
export async function requestDeployment(tx: Repositories, deps: { clock: Clock; activity: Activity }, d: DeploymentRequest): Promise<DeploymentRow | null> {
  const now = unixSeconds(deps.clock);
  const generation = await tx.workloads.request('service', d.serviceId, 'running', now, { retryAtMs: d.retryAtMs, ifGeneration: d.ifGeneration });
  if (generation === null) return null;
  await cancelUnfinished(tx, deps, d.serviceId, 'superseded by a newer request');
  const dep = deploymentRow(deps.clock, { ...d, generation });
  await tx.deployments.insert(dep);
  return dep;
}

/**
 * Inside the caller's transaction (workload row first): the service's workload is to stop
 * (`stopped`: a stop, a suspension, a cancel) or to go (`absent`: a delete), and what was
 * unfinished is cancelled, saying why.
 */
export async function requestStop(tx: Repositories, deps: { clock: Clock; activity: Activity }, serviceId: string, desired: 'stopped' | 'absent', why: string): Promise<void> {
  await tx.workloads.request('service', serviceId, desired, unixSeconds(deps.clock));
  await cancelUnfinished(tx, deps, serviceId, why);
}

/**
 * Inside the caller's transaction: the tenant cancels deployment `deploymentId` of the service.
 * The workload row is written (and so held) first, and the deployment read under it, so that a
 * newer request or the deployment's outcome committed meanwhile is seen: the answer is then 409.
 * The workload is to stop (the controller aborts the apply wherever it runs and removes what it
 * started); the service reads failed.
 */
export async function requestCancel(tx: Repositories, deps: { clock: Clock; activity: Activity }, serviceId: string, deploymentId: string): Promise<void> {
  const seen = await tx.deployments.find(deploymentId);
  if (seen?.service_id !== serviceId) throw new NotFoundError('deployment');
  const generation = seen.generation === null ? null : await tx.workloads.request('service', serviceId, 'stopped', unixSeconds(deps.clock), { ifGeneration: seen.generation });
  const dep = await tx.deployments.find(deploymentId);
  if (generation === null || !dep || (dep.status !== 'pending' && dep.status !== 'running')) throw new ConflictError(`deployment is already ${dep?.status ?? 'gone'}`);
  const running = dep.status === 'running';
  await cancelUnfinished(tx, deps, serviceId, 'cancelled by the tenant');
  // As the deployment says it (a pending one never ran, so nothing else ends the service's deploying).
  const error = running ? 'deployment cancelled: cancelled by the tenant' : 'deployment cancelled';
  await tx.services.update(serviceId, { status: 'failed', last_error: error, upstream: null, updated_at: unixSeconds(deps.clock) });
}

/**
 * A deployment that never ran is cancelled with `why`. One that ran (running now, or pending
 * again while the engine is away) is aborted where it runs by the generation moving on (the
 * controller's watch): it is recorded here, once, with its activity entry.
 */
async function cancelUnfinished(tx: Repositories, deps: { clock: Clock; activity: Activity }, serviceId: string, why: string): Promise<void> {
  const now = unixSeconds(deps.clock);
  for (const d of await tx.deployments.listUnfinished(serviceId)) {
    const ran = d.status === 'running' || d.started_at !== null;
    const error = ran ? `deployment cancelled: ${why}` : why;
    if (!(await tx.deployments.transition(d.id, ['pending', 'running'], { status: 'cancelled', finished_at: now, last_error: error }))) continue;
    if (ran) await deps.activity.record(tx, { tenantId: d.tenant_id, action: 'deployment.cancelled', resourceType: 'deployment', resourceId: d.id, serviceId: d.service_id, details: { error } });
  }
}

export interface DeployerOptions {
  sandbox: SandboxPolicy;
  /** --build-registry: its svc/<tenant>/ paths belong to their tenants. */
  buildRegistry: string | null;
  deadlineMs?: number;
  readyTimeoutMs?: number;
  /**
   * How long a rolling redeploy waits, once the route moved to the new workload, before it stops
   * the one it replaced: until every svcd's proxy sends new requests to the new one (the proxy's
   * ROUTE_FOLLOW_MS, also on a svcd that runs none: the other svcd's proxies route too).
   */
  routeFollowMs: number;
  /** --swarm-ports: where services are published on a swarm (driver capability allocatedPorts). */
  publishedPorts: { from: number; to: number };
}

/** What a Deployer is built from, by name. */
export interface DeployerDeps extends DeployerOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'timers' | 'log'> {
  controller: WorkloadController;
  /** Judges an exit that reconcile found (svcd was down when it happened) as the event stream's would be. */
  crashes: { handleExit(exit: WorkloadExit): Promise<void> };
  /** Called after a deployment changed what the proxy should route. */
  routesChanged: () => void;
}

/** The rules of the `service` kind of workload. */
export class Deployer implements WorkloadRules {
  private driverCapabilities: Promise<DriverCapabilities> | null = null;
  private portFigures: PortFigures | null = null;
  private refreshingPorts = false;
  /** Services whose running copies are being checked for their route (check): one check each at a time. */
  private readonly following = new Set<string>();

  constructor(private readonly deps: DeployerDeps) {
    deps.controller.handle('service', this);
  }

  async apply(w: WorkloadRow, signal: AbortSignal, fenced: Fence): Promise<Applied> {
    const service = await this.deps.store.services.findAny(w.resource_id);
    if (!service) throw new Error('the service record is gone');
    const dep = await this.begin(w, service, fenced);
    const deadlineMs = this.deps.deadlineMs ?? DEPLOY_DEADLINE_MS;
    const deadline = new AbortController();
    const timer = this.deps.timers.setTimeout(() => deadline.abort(new Error(`deploy timed out after ${Math.round(deadlineMs / 60_000)} minutes`)), deadlineMs);
    let rolling = false;
    try {
      // A scale in place that fails (the manager's answer, the count never reached) falls back to
      // a deploy anew: never to the failure path below, which removes what serves.
      const scaled = await this.scaleInPlace(dep, service, AbortSignal.any([signal, deadline.signal])).catch((err: unknown) => {
        if (signal.aborted || deadline.signal.aborted) throw err;
        this.deps.log.warn({ err, service: service.id }, 'a scale in place failed; deploying the service anew with the new count');
        return null;
      });
      if (scaled) return scaled;
      rolling = (await this.capabilities()).setAside;
      const applied = await this.deploy(dep, service, rolling, AbortSignal.any([signal, deadline.signal]));
      if (rolling) await this.takeOver(service, applied, signal, fenced);
      return applied;
    } catch (err) {
      // A deploy that fails before the new container replaced the old one (a refused image, a
      // failed pull, a container never ready) leaves the old one running, or set aside, with
      // nothing to point at it once the service reads failed: it goes with the failure, as a
      // container the driver started does. An abort, or a lost lease, leaves it to the newer
      // generation (whose apply sets aside or removes what runs): checked in the store too, since
      // a lease can lapse before this svcd's renewal notices, and another svcd's apply may be
      // serving from these containers by then.
      if (!signal.aborted && !(err instanceof Superseded) && (await fenced(() => Promise.resolve(true)).catch(() => null)) !== null) {
        if (service.container_id) await this.deps.runtime.remove(service.container_id).catch(() => {});
        await this.deps.runtime.remove(workloadName(service.id)).catch(() => {});
        if (rolling) await this.removeSetAside(service, null);
      }
      throw err;
    } finally {
      timer.cancel();
    }
  }

  /**
   * A scale of a service that runs what its last deployment deployed: its replicas changed in
   * place where the driver can (Swarm), the running ones left alone; null to deploy it anew (one
   * engine, a service not running, one whose running workload is not its last good deployment's).
   * Resolves once the new count runs (or after the readiness limit); a new replica joins the
   * route once it passes the health check (check), and the route names one that runs now.
   */
  private async scaleInPlace(dep: DeploymentRow, service: ServiceRow, signal: AbortSignal): Promise<Applied | null> {
    const { runtime } = this.deps;
    if (dep.reason !== 'scale' || service.container_id === null || !runtime.scale || !(await this.capabilities()).replicas) return null;
    const before = await runtime.inspect(service.container_id);
    const ranBy = before?.labels[LABELS.deployment];
    const ran = ranBy ? await this.deps.store.deployments.find(ranBy) : undefined;
    // The service's own workload (not one a rolling apply set aside), running its last good deployment.
    if (before?.state !== 'running' || before.name !== workloadName(service.id) || ran?.status !== 'succeeded' || ran.image !== dep.image) return null;
    // New replicas as the running ones are: only while that is what a deploy would run now (the
    // tenant's quota share and the sandbox unchanged, the image still the tenant's to run).
    const tenant = await this.deps.store.tenants.findById(service.tenant_id);
    if (!tenant || before.labels[SHAPE_LABEL] !== workloadShape(workloadLimits(tenant), await this.deps.sandbox.use())) return null;
    if (tenantImageRefusal(dep.image, { tenantId: service.tenant_id, buildRegistry: this.deps.buildRegistry }) !== null) return null;
    // A published port outside a changed --swarm-ports: a deploy moves it into the range (the nodes' gate covers only that).
    const { from, to } = this.deps.publishedPorts;
    if (service.published_port !== null && (service.published_port < from || service.published_port > to)) return null;
    if (!(await runtime.scale(before.id, service.replicas, { timeoutMs: this.deps.readyTimeoutMs ?? READY_TIMEOUT_MS, signal }))) return null;
    const after = await runtime.inspect(before.id);
    if (after?.state !== 'running' || !after.address) throw new Error('no replica of the service runs after it was scaled');
    return { ref: after.id, endpoint: { host: after.address.host, port: after.address.port }, inPlace: true };
  }

  /**
   * A rolling redeploy's last steps, once the new container is ready beside the old one (set
   * aside, still serving): the route moves to the new one, and the old one is stopped once every
   * proxy sends new requests to the new one, so that no request finds nothing answering.
   */
  private async takeOver(service: ServiceRow, applied: Applied, signal: AbortSignal, fenced: Fence): Promise<void> {
    const upstream = `${applied.endpoint.host}:${String(applied.endpoint.port ?? service.port)}`;
    const moved = await fenced(async (tx) => {
      await tx.services.update(service.id, { upstream, container_id: applied.ref, updated_at: unixSeconds(this.deps.clock) });
      tx.afterCommit(this.deps.routesChanged);
      return true;
    });
    if (moved === null) throw new Superseded('this apply no longer holds the workload');
    // Something served: requests may still be on their way to it.
    if (service.upstream !== null && this.deps.routeFollowMs > 0) {
      await pause(this.deps.timers, this.deps.routeFollowMs, signal);
      signal.throwIfAborted();
      // An exit now is no crash to the crash handler (the service still reads deploying): the
      // deploy fails instead, before the old container goes too.
      const now = await this.deps.runtime.inspect(applied.ref);
      if (now?.state !== 'running') throw new Error(`the new container ${now ? `exited with code ${String(now.exitCode ?? '?')}` : 'vanished'} while the route moved to it`);
    }
    // Not waited for: the deployment has succeeded, and the service reads running (its crashes
    // judged again) while the old container gets its grace period. A svcd that dies meanwhile
    // leaves it to reconcile, which removes what is set aside once nothing applies the service.
    // A first deploy set nothing aside (an interrupted one's leftover is reconcile's too).
    if (service.container_id !== null || service.upstream !== null) void this.removeSetAside(service, applied.ref);
  }

  /**
   * Stops (with the service's grace period, for requests in flight) and removes the containers
   * of the service that rolling applies set aside; `keep` is the one now serving. A failure is
   * left to reconcile (the controller removes what is set aside once the workload is settled).
   */
  private async removeSetAside(service: ServiceRow, keep: string | null): Promise<void> {
    try {
      const aside = (await setAsideOf(this.deps.runtime, { tenantId: service.tenant_id, kind: 'service', resourceId: service.id, name: workloadName(service.id) })).filter((c) => c.id !== keep);
      for (const c of aside) {
        await this.deps.runtime.stop(c.id, STOP_TIMEOUT_S);
        await this.deps.runtime.remove(c.id);
      }
    } catch (err) {
      this.deps.log.warn({ err, service: service.id }, 'a container a redeploy replaced could not be removed; reconcile removes it');
    }
  }

  async observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const dep = await tx.deployments.atGeneration(w.resource_id, w.generation);
    tx.afterCommit(this.deps.routesChanged);
    switch (outcome.state) {
      case 'running': {
        await this.finish(tx, dep, 'succeeded', null);
        // Its route: the service's port at the endpoint the driver reported; a scale in place
        // keeps the replicas routed already (those gone leave it at the next reconcile, and the
        // proxy tries another meanwhile).
        const service = await tx.services.findAny(w.resource_id);
        const endpoint = service ? joinUpstreams([{ host: outcome.applied.endpoint.host, port: outcome.applied.endpoint.port ?? service.port }]) : null;
        const inPlace = outcome.applied.inPlace === true && service?.upstream != null && splitUpstreams(service.upstream).some((a) => joinUpstreams([a]) === endpoint);
        await tx.services.update(w.resource_id, {
          status: 'running',
          last_error: null,
          container_id: outcome.applied.ref,
          upstream: inPlace ? service.upstream : endpoint,
          updated_at: now,
        });
        return;
      }
      case 'failed':
        await this.finish(tx, dep, 'failed', outcome.error);
        await tx.services.update(w.resource_id, { status: 'failed', last_error: outcome.error, upstream: null, container_id: null, updated_at: now });
        return;
      case 'waiting':
        // The engine's fault: the deployment waits as pending, its record saying what the engine
        // said; the tenant sees that the engine is away, not a failure of its code.
        if (dep) await tx.deployments.transition(dep.id, ['running'], { status: 'pending', last_error: outcome.error });
        await tx.services.update(w.resource_id, { status: 'deploying', last_error: ENGINE_UNAVAILABLE, upstream: null, container_id: null, updated_at: now });
        return;
      case 'stopped':
        // Its status was written by the request (stopped, or failed for a cancel).
        await tx.services.update(w.resource_id, { upstream: null, container_id: null, updated_at: now });
        return;
      case 'absent':
        return;
    }
  }

  /**
   * Reconcile of a service seen running: one the engine stopped as it went away (status
   * deploying) is deployed again now that the engine answers; a vanished container is
   * redeployed; an exit that no event reported (svcd was down) is judged as a crash.
   */
  async check(w: WorkloadRow, info: WorkloadInfo | null): Promise<void> {
    const s = await this.deps.store.services.findAny(w.resource_id);
    if (s?.desired_state !== 'running' || s.circuit_open_at !== null) return;
    if (s.status === 'deploying') {
      await this.redeploy(s, w.generation, 'resume', 'no deployment was running for this service; deploying it again');
    } else if (!info) {
      await this.redeploy(s, w.generation, 'reconcile', 'the container vanished; redeploying');
    } else if (info.state === 'exited' || info.state === 'dead') {
      await this.deps.crashes.handleExit({ id: info.id, labels: info.labels, exitCode: info.exitCode });
    } else if (info.state === 'running' && info.address?.published && s.status === 'running' && !this.following.has(s.id)) {
      // The driver moved it (Swarm rescheduled its task to another node), or ran another of its
      // replicas, or one of them stopped: the route follows. Not waited for: a replica's health
      // check may take seconds (a tenant's slow route), which would hold up every other
      // workload's reconcile; routeMoved re-reads what it changes.
      const running = info.addresses ?? [info.address];
      this.following.add(s.id);
      void this.routedCopies(s, running)
        .then(async (upstream) => {
          if (upstream !== null && s.upstream !== upstream) await this.routeMoved(s, w, upstream);
        })
        .catch((err: unknown) => this.deps.log.warn({ err, service: s.id }, "the service's route could not follow its workload; tried again at the next reconcile"))
        .finally(() => this.following.delete(s.id));
    }
  }

  /**
   * The route of a service's running copies: those routed already stay, one not routed yet joins
   * once it passes the service's health check (one try now, another at the next look), one no
   * longer running leaves.
   */
  private async routedCopies(s: ServiceRow, running: ReadonlyArray<{ host: string; port: number }>): Promise<string | null> {
    const routed = new Set(s.upstream === null ? [] : splitUpstreams(s.upstream).map((a) => joinUpstreams([a])));
    const check = readinessOf(healthCheckOf(s.health_check), 0);
    const kept = (await Promise.all(running.map(async (a) => (routed.has(joinUpstreams([a])) || (await probePasses(check, a, this.deps.timers)) ? [a] : [])))).flat();
    // None routed runs any more and none new passes yet (its one task moved): to where it runs
    // now, as the proxy cannot reach what is gone either.
    return joinUpstreams(kept.length > 0 ? kept : running);
  }

  /** The service's route, to where its running workload answers now (unless it changed meanwhile). */
  private async routeMoved(s: ServiceRow, w: WorkloadRow, upstream: string): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const moved = await this.deps.store.transaction(async (tx) => {
      const current = await tx.services.findAny(s.id);
      const workload = await tx.workloads.find('service', s.id);
      // A newer deployment, a stop or another svcd's move since the look: theirs stands.
      if (current?.status !== 'running' || current.upstream !== s.upstream || workload?.generation !== w.generation) return false;
      await tx.services.update(s.id, { upstream, updated_at: now });
      tx.afterCommit(this.deps.routesChanged);
      return true;
    });
    if (moved) this.deps.log.info({ service: s.id, from: s.upstream, to: upstream }, "the service's workload moved; its route follows");
  }

  /**
   * The deployment of the claimed generation, turned running, while this apply still holds the
   * row (a svcd that stalled past its lease writes nothing). One already running was left by a
   * svcd that died (its lease lapsed, which is how this one got the row): it is recorded as
   * interrupted and a new deployment requested, which this apply gives way to.
   */
  private async begin(w: WorkloadRow, service: ServiceRow, fenced: Fence): Promise<DeploymentRow> {
    const now = unixSeconds(this.deps.clock);
    const began = await fenced(async (tx) => {
      const dep = await tx.deployments.atGeneration(service.id, w.generation);
      if (dep && (await tx.deployments.transition(dep.id, ['pending'], { status: 'running', started_at: now, last_error: null }))) {
        return { ...dep, status: 'running' as const, started_at: now, last_error: null };
      }
      // None of this generation: a service that was deploying when svc moved services under the
      // controller with no deployment left running (the engine had stopped it).
      const why = dep ? INTERRUPTED : 'no deployment was running for this service; deploying it again';
      if (dep) await tx.deployments.transition(dep.id, ['running'], { status: 'failed', finished_at: now, last_error: INTERRUPTED });
      await this.requestAgain(tx, service, w.generation, 'resume', why);
      this.deps.log.warn({ deployment: dep?.id, service: service.id }, 'resumed a deployment interrupted by a stopped svcd');
      return 'resumed' as const;
    });
    if (began === null) throw new Superseded('this apply no longer holds the workload');
    if (began === 'resumed') throw new Superseded(INTERRUPTED);
    return began;
  }

  /** A new deployment asked for by svc itself (reconcile), if the workload is still at `generation`. */
  private async redeploy(s: ServiceRow, generation: number, reason: string, why: string): Promise<void> {
    if (!(await this.deps.store.transaction((tx) => this.requestAgain(tx, s, generation, reason, why)))) return;
    this.deps.controller.kick();
  }

  /** Inside a transaction: a new deployment of the service's image, saying why; false when the generation moved on. */
  private async requestAgain(tx: Repositories, s: ServiceRow, generation: number, reason: string, why: string): Promise<boolean> {
    const d = await requestDeployment(tx, this.deps, { tenantId: s.tenant_id, serviceId: s.id, image: s.image, reason, ifGeneration: generation });
    if (!d) return false;
    await tx.services.update(s.id, { status: 'deploying', last_error: why, upstream: null, updated_at: unixSeconds(this.deps.clock) });
    await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.reconciled', resourceType: 'service', resourceId: s.id, serviceId: s.id, details: { reason: why } });
    tx.afterCommit(this.deps.routesChanged);
    return true;
  }

  /** Runs the deployment's image as the service's container; resolves once it passes its health check on its port. */
  private async deploy(dep: DeploymentRow, service: ServiceRow, rolling: boolean, signal: AbortSignal): Promise<Applied> {
    const tenant = await this.deps.store.tenants.findById(service.tenant_id);
    if (!tenant) throw new Error('tenant not found');
    // Reads of their own, asked together (one after another, 2-3 ms of every deploy's way to its
    // container). The published port is allocated after them, once the image is known to run.
    const [image, sealedEnv, sandbox] = await Promise.all([this.imageToRun(dep.image, service.tenant_id, signal), this.deps.store.serviceEnv.get(service.id), this.deps.sandbox.use()]);
    const env = Object.fromEntries([...sealedEnv].map(([k, v]) => [k, this.deps.sealer.open(v)]));
    if (env.PORT === undefined) env.PORT = String(service.port);
    const published = (await this.allocatesPorts()) ? await this.publishedPort(service.id) : null;
    const limits = workloadLimits(tenant);
    return this.deps.runtime.apply({
      spec: {
        ...(published === null ? {} : { publish: { address: '0.0.0.0', port: published } }),
        name: workloadName(service.id),
        image,
        env,
        port: service.port,
        tenantId: service.tenant_id,
        kind: 'service',
        resourceId: service.id,
        labels: { [LABELS.deployment]: dep.id, [SHAPE_LABEL]: workloadShape(limits, sandbox) },
        limits,
        sandbox,
        tenantCode: true,
        ...(service.replicas > 1 ? { replicas: service.replicas } : {}),
      },
      // Rolling: what runs is set aside and serves until the new one took over (takeOver).
      // Otherwise whatever ran before goes first, including a container an interrupted deploy left.
      ...(rolling ? { setAside: true } : { replaces: service.container_id }),
      pull: 'never',
      // Ready = its health check passing on the service's port (not a port its image exposes: an
      // image may expose several, and the engine lists them sorted): a TCP connect by default.
      ready: readinessOf(healthCheckOf(service.health_check), this.deps.readyTimeoutMs ?? READY_TIMEOUT_MS),
      signal,
      // Recorded before it is ready: its logs say why a slow start is slow.
      started: (ref) => this.deps.store.services.update(service.id, { container_id: ref, updated_at: unixSeconds(this.deps.clock) }),
    });
  }

  /** The port the service is published on (on a swarm), for its life (provisioning/published-ports.ts). */
  private publishedPort(serviceId: string): Promise<number> {
    const owner = { table: 'services' as const, id: serviceId, current: async () => (await this.deps.store.services.findAny(serviceId))?.published_port, what: 'the service', retry: 'deploy again' };
    return publishedPortFor(this.deps.store, owner, this.deps.publishedPorts, () => unixSeconds(this.deps.clock));
  }

  /** Refuses a new service (409) when the driver publishes each on a port svcd allocates and none is left (provisioning/published-ports.ts). */
  async assertPortLeft(): Promise<void> {
    if (await this.allocatesPorts()) await assertPortLeft(this.deps.store, this.deps.publishedPorts, unixSeconds(this.deps.clock));
  }

  /**
   * The ports of --swarm-ports free (neither held, nor resting, nor promised to a service not
   * deployed yet) and in all, for the operator's
   * metrics; null on a driver that allocates none, and before the first read. Never waits for the
   * store (as Domains.operatorFigures): a scrape shows figures at most one scrape old.
   */
  publishedPortFigures(): PortFigures | null {
    if (!this.refreshingPorts) {
      this.refreshingPorts = true;
      void this.readPortFigures()
        .then((figures) => (this.portFigures = figures))
        .catch((err: unknown) => this.deps.log.warn({ err }, 'published port figures could not be read'))
        .finally(() => (this.refreshingPorts = false));
    }
    return this.portFigures;
  }

  private async readPortFigures(): Promise<PortFigures | null> {
    if (!(await this.allocatesPorts())) return null;
    return readPortFigures(this.deps.store, this.deps.publishedPorts, unixSeconds(this.deps.clock));
  }

  /** Whether the driver publishes services on ports svcd allocates. */
  private async allocatesPorts(): Promise<boolean> {
    return (await this.capabilities()).allocatedPorts;
  }

  /** What the driver can do (asked once: it does not change). */
  private capabilities(): Promise<DriverCapabilities> {
    this.driverCapabilities ??= this.deps.runtime.capabilities().catch((err: unknown) => {
      this.driverCapabilities = null; // asked again next time
      throw err;
    });
    return this.driverCapabilities;
  }

  /**
   * The image ID to run for a tenant's image reference (images.ts): refused when the tenant may
   * not name it; pulled by its full name on every deploy unless it is the tenant's own local
   * build (no registry holds those); a failed pull fails the deploy, since a local copy proves
   * nothing about who may run it. Running by ID means the name cannot be retagged under us.
   */
  private async imageToRun(ref: string, tenantId: string, signal: AbortSignal): Promise<string> {
    // Checked again here: deployments recorded before this rule, and snapshots, carry names too.
    const refusal = tenantImageRefusal(ref, { tenantId, buildRegistry: this.deps.buildRegistry });
    if (refusal !== null) throw new Error(refusal);
    const id = await this.deps.runtime.imageId(await pullTenantImage(this.deps.runtime, ref, signal));
    if (id === null) throw new Error(`image ${ref} is not present (a local build that was removed?): build again`);
    return id;
  }

  /** The deployment's outcome and its activity entry (inside the observation's transaction). */
  private async finish(tx: Repositories, dep: DeploymentRow | undefined, status: 'succeeded' | 'failed', error: string | null): Promise<void> {
    if (!dep) return;
    // Pending too: an apply that failed before its deployment turned running (a record it could not read).
    if (!(await tx.deployments.transition(dep.id, ['pending', 'running'], { status, finished_at: unixSeconds(this.deps.clock), last_error: error }))) return;
    await this.deps.activity.record(tx, {
      tenantId: dep.tenant_id,
      action: `deployment.${status}`,
      resourceType: 'deployment',
      resourceId: dep.id,
      serviceId: dep.service_id,
      details: error ? { error } : {},
    });
    this.deps.log.info({ deployment: dep.id, service: dep.service_id, status, error }, 'deployment finished');
  }
}
