// Reconcile: on start and every 30 s, the store's services are matched against the engine's
// containers. Deploys interrupted by a dead svcd are failed with a clear error and run again;
// services whose container vanished are redeployed; exits missed while svcd was down count as
// crashes; containers no service owns are removed.
import { unixSeconds } from '../clock.js';
import { LABELS, engineAnswers } from '../runtime/index.js';
import type { ServiceRow } from '../store/index.js';
import type { CrashHandler } from './crashes.js';
import { deploymentRow, type Deployer } from './deployer.js';
import type { Platform } from '../platform.js';

export const RECONCILE_EVERY_MS = 30_000;
export const INTERRUPTED = 'interrupted: svcd stopped during this deployment; a new one was started';

/** What a Reconciler is built from, by name. */
export interface ReconcilerDeps extends Pick<Platform, 'store' | 'runtime' | 'activity' | 'clock' | 'log' | 'holder'> {
  deployer: Deployer;
  crashes: CrashHandler;
  routesChanged: () => void;
}

export class Reconciler {
  constructor(private readonly deps: ReconcilerDeps) {}

  async run(): Promise<void> {
    // Nothing is judged while the engine is away: every container would look vanished. The
    // services it stopped wait as deploying and are deployed again on the first run after.
    if (!(await engineAnswers(this.deps.runtime))) {
      this.deps.log.warn('container engine unavailable: reconcile waits for it');
      return;
    }
    await this.resumeDeployments();
    await this.matchServices();
    await this.removeOrphans();
  }

  /** Deployments nobody runs: pending ones start; running ones whose runner died are redone. */
  private async resumeDeployments(): Promise<void> {
    for (const d of await this.deps.store.deployments.listUnfinished()) {
      if (this.deps.deployer.owns(d.id, d.service_id)) continue;
      if (d.status === 'pending') {
        this.deps.deployer.start(d.id, d.service_id);
        continue;
      }
      // Running, but is anyone running it? Only if someone holds the service's deploy lease.
      const lease = `deploy:${d.service_id}`;
      if (!(await this.deps.store.jobLocks.tryAcquire(lease, this.deps.holder, this.deps.clock.now(), 60_000))) continue;
      try {
        const now = unixSeconds(this.deps.clock);
        if (!(await this.deps.store.deployments.transition(d.id, ['running'], { status: 'failed', finished_at: now, last_error: INTERRUPTED }))) continue;
        const s = await this.deps.store.services.findAny(d.service_id);
        if (s?.desired_state === 'running') await this.redeploy(s, 'resume', INTERRUPTED);
      } finally {
        await this.deps.store.jobLocks.release(lease, this.deps.holder);
      }
      this.deps.log.warn({ deployment: d.id, service: d.service_id }, 'resumed a deployment interrupted by a stopped svcd');
    }
  }

  private async matchServices(): Promise<void> {
    const services = await this.deps.store.services.listAll();
    // Read after the services, so a deployment started meanwhile is seen.
    const deploying = await this.servicesDeploying();
    for (const s of services) {
      if (s.desired_state !== 'running' || s.circuit_open_at !== null) continue;
      if (deploying.has(s.id)) continue;
      if (s.status === 'deploying' || s.status === 'running' && !s.container_id) {
        await this.redeploy(s, 'resume', 'no deployment was running for this service; deploying it again');
        continue;
      }
      if (s.status !== 'running' || !s.container_id) continue;
      const w = await this.deps.runtime.inspect(s.container_id);
      if (!w) {
        await this.redeploy(s, 'reconcile', 'the container vanished; redeploying');
      } else if (w.state === 'exited' || w.state === 'dead') {
        // An exit the event stream did not deliver (svcd was down): a crash like any other.
        await this.deps.crashes.handleExit({ id: w.id, labels: w.labels, exitCode: w.exitCode });
      }
    }
  }

  /** Service containers that no service points at, and that no deployment is about to claim. */
  private async removeOrphans(): Promise<void> {
    // In this order: a container listed was either claimed by a deployment still unfinished when
    // the deployments are read, or recorded on its service before that deployment finished.
    const workloads = await this.deps.runtime.list({ kind: 'service' });
    const deploying = await this.servicesDeploying();
    const services = new Map((await this.deps.store.services.listAll()).map((s) => [s.id, s]));
    for (const w of workloads) {
      const serviceId = w.labels[LABELS.resource];
      const s = serviceId ? services.get(serviceId) : undefined;
      if (s && s.container_id === w.id) continue;
      if (s && deploying.has(s.id)) continue;
      await this.deps.runtime.remove(w.id);
      this.deps.log.info({ container: w.id, service: serviceId }, 'removed an orphan container');
    }
  }

  /** Ids of the services with a pending or running deployment. */
  private async servicesDeploying(): Promise<Set<string>> {
    return new Set((await this.deps.store.deployments.listUnfinished()).map((d) => d.service_id));
  }

  private async redeploy(s: ServiceRow, reason: string, why: string): Promise<void> {
    const dep = deploymentRow(this.deps.clock, s.tenant_id, s.id, s.image, reason);
    await this.deps.store.transaction(async (tx) => {
      await tx.services.update(s.id, { status: 'deploying', last_error: why, upstream: null, updated_at: unixSeconds(this.deps.clock) });
      await tx.deployments.insert(dep);
      await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.reconciled', resourceType: 'service', resourceId: s.id, serviceId: s.id, details: { reason: why } });
    });
    this.deps.routesChanged();
    this.deps.deployer.start(dep.id, s.id);
  }
}
