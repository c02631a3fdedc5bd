// Runs deployments: each is a record (pending -> running -> succeeded | failed | cancelled) and
// runs in the background under a 10-minute deadline. Deployments of one service run one after
// another: in this process through a chain per service, across processes through a lease per
// service in the store. The record is re-read after taking the lease, so a deployment cancelled
// meanwhile is not run. A deployment whose lease is held elsewhere stays pending.
import { type Clock, type TimerHandle, unixSeconds } from '../clock.js';
import { LABELS, engineAnswers, isEngineFault, workloadLimits, type SandboxPolicy } from '../runtime/index.js';
import type { DeploymentRow, ServiceRow } from '../store/index.js';
import { timeOrderedId } from '../ids.js';
import { isLocallyBuilt, pullTenantImage, tenantImageRefusal } from './images.js';
import type { Platform } from '../platform.js';
import { watchRecord } from '../provisioning/watch.js';

export const DEPLOY_DEADLINE_MS = 10 * 60_000;
/** The service's last_error while the engine is away: not a fault of the tenant's code. */
export const ENGINE_UNAVAILABLE = 'container engine unavailable; svc deploys the service again when the engine answers';
/** How long a started container has to accept TCP connections on its port. */
export const READY_TIMEOUT_MS = 60_000;
/** A TCP connect is cheap; a long pause here is time the first request waits for nothing. */
const READY_POLL_MS = 25;
/**
 * A running deployment's lease on its service, renewed every LEASE_RENEW_MS: another svcd's
 * reconcile takes a deployment over this long after the svcd running it died.
 */
export const DEPLOY_LEASE_MS = 30_000;
const LEASE_RENEW_MS = 10_000;
/** A readiness probe (a TCP connect) that hangs is tried again after this long. */
const READY_PROBE_TIMEOUT_MS = 2_000;
/** How often a wait for readiness re-reads its deployment (cancelled through another svcd?). */
const RECORD_READ_EVERY_MS = 1_000;
export interface DeployerOptions {
  sandbox: SandboxPolicy;
  /** --build-registry: its svc/<tenant>/ paths belong to their tenants. */
  buildRegistry: string | null;
  deadlineMs?: number;
  readyTimeoutMs?: number;
}

class Cancelled extends Error {}

/** A new pending deployment record. */
export function deploymentRow(clock: Clock, tenantId: string, serviceId: string, image: string, reason: string, buildId: string | null = null): DeploymentRow {
  return {
    id: timeOrderedId(clock.now()),
    service_id: serviceId,
    tenant_id: tenantId,
    status: 'pending',
    reason,
    image,
    // Every deploy pulls (imageToRun) but a local build's, which no registry holds.
    pull: isLocallyBuilt(image) ? 0 : 1,
    build_id: buildId,
    last_error: null,
    created_at: unixSeconds(clock),
    started_at: null,
    finished_at: null,
  };
}

export function workloadName(serviceId: string): string {
  return `svc-${serviceId}`;
}

/** What a Deployer is built from, by name. */
export interface DeployerDeps extends DeployerOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'timers' | 'log' | 'holder'> {
  /** Called after a deployment changed what the proxy should route. */
  routesChanged: () => void;
}

export class Deployer {
  private readonly active = new Map<string, AbortController>();
  /** The last run queued per service: the next one starts when it ends (earlier ones run before it). */
  private readonly chains = new Map<string, Promise<void>>();
  /** Deployments waiting for a delay (crash backoff): reconcile leaves them alone. */
  private readonly delayed = new Map<string, TimerHandle>();
  private closed = false;

  constructor(private readonly deps: DeployerDeps) {}

  /** Runs a deployment in the background, after the service's earlier ones. */
  start(deploymentId: string, serviceId: string): void {
    if (this.closed) return;
    const previous = this.chains.get(serviceId) ?? Promise.resolve();
    const run: Promise<void> = previous
      .then(() => this.run(deploymentId, serviceId))
      .catch((err: unknown) => this.deps.log.error({ err, deploymentId }, 'deployment crashed'))
      .finally(() => {
        if (this.chains.get(serviceId) === run) this.chains.delete(serviceId);
      });
    this.chains.set(serviceId, run);
  }

  /** Runs a deployment after a delay (crash backoff). */
  startLater(deploymentId: string, serviceId: string, delayMs: number): void {
    if (this.closed) return;
    this.delayed.set(
      deploymentId,
      this.deps.timers.setTimeout(() => {
        this.delayed.delete(deploymentId);
        this.start(deploymentId, serviceId);
      }, delayMs),
    );
  }

  /** Whether this process runs, or will run, deployments of the service or this deployment. */
  owns(deploymentId: string, serviceId: string): boolean {
    return this.delayed.has(deploymentId) || this.chains.has(serviceId);
  }

  /** Stops a deployment this process runs; false when it runs elsewhere or not at all. */
  abort(deploymentId: string, why: string): boolean {
    const c = this.active.get(deploymentId);
    if (!c) return false;
    c.abort(new Cancelled(`deployment cancelled: ${why}`));
    return true;
  }

  /** Waits until this process runs no deployment of the service. */
  async idleFor(serviceId: string): Promise<void> {
    while (this.chains.has(serviceId)) await this.chains.get(serviceId);
  }

  /** Waits for the deployments under way (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.chains.size > 0) await Promise.all(this.chains.values());
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.delayed.values()) t.cancel();
    this.delayed.clear();
    for (const c of this.active.values()) c.abort(new Error('svcd is shutting down'));
    await this.idle();
  }

  private async run(deploymentId: string, serviceId: string): Promise<void> {
    const lease = `deploy:${serviceId}`;
    const deadlineMs = this.deps.deadlineMs ?? DEPLOY_DEADLINE_MS;
    if (!(await this.deps.store.jobLocks.tryAcquire(lease, this.deps.holder, this.deps.clock.now(), DEPLOY_LEASE_MS))) return;
    const controller = new AbortController();
    const deadline = this.deps.timers.setTimeout(
      () => controller.abort(new Error(`deploy timed out after ${Math.round(deadlineMs / 60_000)} minutes`)),
      deadlineMs,
    );
    const renewal = this.deps.timers.setInterval(() => void this.renewLease(lease, controller), LEASE_RENEW_MS);
    this.active.set(deploymentId, controller);
    try {
      const now = unixSeconds(this.deps.clock);
      if (!(await this.deps.store.deployments.transition(deploymentId, ['pending'], { status: 'running', started_at: now }))) return;
      const dep = await this.deps.store.deployments.find(deploymentId);
      const service = dep && (await this.deps.store.services.findAny(dep.service_id));
      if (!dep || !service) return;
      try {
        const upstream = await this.deploy(dep, service, controller.signal);
        await this.finish(dep, service, 'succeeded', null, upstream);
      } catch (err) {
        const reason: unknown = controller.signal.aborted ? controller.signal.reason : err;
        const cancelled = reason instanceof Cancelled;
        const message = (reason as Partial<Error>).message ?? String(reason);
        const engineFault = !cancelled && !controller.signal.aborted && (isEngineFault(err) || !(await engineAnswers(this.deps.runtime)));
        await this.finish(dep, service, cancelled ? 'cancelled' : 'failed', message, null, engineFault);
      }
    } finally {
      deadline.cancel();
      renewal.cancel();
      this.active.delete(deploymentId);
      await this.deps.store.jobLocks.release(lease, this.deps.holder);
    }
  }

  /**
   * Extends this process's lease on the service's deployments. Lost (it lapsed, and another
   * svcd's reconcile took the deployment over): this run stops, and the other one's outcome
   * stands (finish() leaves a record it did not move alone).
   */
  private async renewLease(lease: string, controller: AbortController): Promise<void> {
    try {
      if (!(await this.deps.store.jobLocks.tryAcquire(lease, this.deps.holder, this.deps.clock.now(), DEPLOY_LEASE_MS))) {
        controller.abort(new Error('another svcd took this deployment over: this one did not renew its lease in time'));
      }
    } catch (err) {
      // The store not answering for a moment: the lease has 30 s, the next renewal tries again.
      this.deps.log.warn({ err, lease }, 'deployment lease renewal failed');
    }
  }

  /**
   * Throws when the deployment should stop: aborted here (cancel, deadline, shutdown), or no
   * longer running in the store (cancelled through another svcd).
   */
  private async stillRunning(depId: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason));
    const now = await this.deps.store.deployments.find(depId);
    if (now?.status !== 'running') throw new Cancelled(now?.last_error ?? 'deployment cancelled');
  }

  /** Returns the running container's host:port on its tenant network. */
  private async deploy(dep: DeploymentRow, service: ServiceRow, signal: AbortSignal): Promise<string> {
    const check = () => this.stillRunning(dep.id, signal);
    const tenant = await this.deps.store.tenants.findById(service.tenant_id);
    if (!tenant) throw new Error('tenant not found');
    const image = await this.imageToRun(dep.image, service.tenant_id, signal);
    await check();

    const sealedEnv = await this.deps.store.serviceEnv.get(service.id);
    const env = Object.fromEntries([...sealedEnv].map(([k, v]) => [k, this.deps.sealer.open(v)]));
    if (env.PORT === undefined) env.PORT = String(service.port);
    // The record once a second while the driver waits: a cancel through another svcd stops it.
    const watch = watchRecord(signal, this.deps.timers, RECORD_READ_EVERY_MS, check);
    try {
      const applied = await this.deps.runtime.apply({
        spec: {
          name: workloadName(service.id),
          image,
          env,
          port: service.port,
          tenantId: service.tenant_id,
          kind: 'service',
          resourceId: service.id,
          labels: { [LABELS.deployment]: dep.id },
          limits: workloadLimits(tenant),
          sandbox: await this.deps.sandbox.use(),
          tenantCode: true,
        },
        // Whatever ran before, including a container left by an interrupted deploy.
        replaces: service.container_id,
        pull: 'never',
        // Ready = accepting TCP on the service's port (not a port its image exposes: an image may
        // expose several, and the engine lists them sorted).
        ready: { timeoutMs: this.deps.readyTimeoutMs ?? READY_TIMEOUT_MS, everyMs: READY_POLL_MS, probeTimeoutMs: READY_PROBE_TIMEOUT_MS },
        signal: watch.signal,
        // Recorded before it is ready: its logs say why a slow start is slow.
        started: (ref) => this.deps.store.services.update(service.id, { container_id: ref, updated_at: unixSeconds(this.deps.clock) }),
      });
      return `${applied.endpoint.host}:${service.port}`;
    } finally {
      watch.stop();
    }
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

  /**
   * Records the outcome on the deployment and the service. A deployment that failed for the
   * engine's fault (engineFault) leaves its service deploying, not failed: the reconciler
   * deploys it again once the engine answers (reconciler.ts).
   */
  private async finish(
    dep: DeploymentRow,
    service: ServiceRow,
    status: 'succeeded' | 'failed' | 'cancelled',
    error: string | null,
    upstream: string | null = null,
    engineFault = false,
  ): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const moved = await this.deps.store.deployments.transition(dep.id, ['running'], { status, finished_at: now, last_error: error });
    if (moved) {
      await this.deps.activity.record(this.deps.store, {
        tenantId: service.tenant_id,
        action: `deployment.${status}`,
        resourceType: 'deployment',
        resourceId: dep.id,
        serviceId: service.id,
        details: error ? { error } : {},
      });
    } else {
      // Cancelled through the store by another svcd (which recorded it): this process still
      // cleans up what it started, below. Any other outcome recorded elsewhere is left alone.
      const recorded = await this.deps.store.deployments.find(dep.id);
      if (recorded?.status !== 'cancelled') return;
      status = 'cancelled';
      error = recorded.last_error;
      engineFault = false;
    }
    this.deps.log.info({ deployment: dep.id, service: service.id, status, error }, 'deployment finished');
    // Superseded by a newer deployment (restart during a deploy): that one owns the service now.
    if ((await this.deps.store.deployments.listUnfinished(service.id)).some((d) => d.id !== dep.id)) return;
    const succeeded = status === 'succeeded';
    if (!succeeded) {
      // The container this deployment may have started is not left running half-ready.
      const current = await this.deps.store.services.findAny(service.id);
      if (current?.container_id) await this.deps.runtime.remove(current.container_id).catch(() => {});
    }
    await this.deps.store.services.update(service.id, {
      status: succeeded ? 'running' : engineFault ? 'deploying' : 'failed',
      last_error: succeeded ? null : engineFault ? `${ENGINE_UNAVAILABLE}: ${error}` : error,
      upstream,
      ...(succeeded ? {} : { container_id: null }),
      updated_at: now,
    });
    this.deps.routesChanged();
  }
}
