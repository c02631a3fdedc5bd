// The warm pool: per template, a few environment containers started ahead of time and owned by
// no tenant, on svc's internal warm-pool network (no way out, no way to each other). Each is a
// workload of the `warm` kind: the refill (a periodic job) writes its pool row and its workload
// row in one transaction, and the workload controller of any svcd starts it (a svcd dying
// midway is taken over like any workload). A create claims a ready one under a conditional
// update in the store, so two creates (or two svcd processes) never get the same one; from the
// claim on it is the environment's (its `warm` row goes in the claim's transaction), moved onto
// the tenant's network: the environment runs at once. A claimed container has never run
// anything, so there is no state to reset.
import type { TemplateId } from '@svc/contract';
import { TEMPLATE_IDS } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { hexId } from '../ids.js';
import { WARM_POOL_TENANT, type Applied } from '../runtime/index.js';
import type { Repositories, WorkloadRow } from '../store/index.js';
import { parseSpecRecord, type WorkloadController, type WorkloadOutcome, type WorkloadRules, type WorkloadSpecRecord } from '../workloads/controller.js';
import type { Platform } from '../platform.js';
import { newAgentToken } from './agent.js';

export interface WarmPoolOptions {
  /** Ready containers to keep per template. */
  size: number;
  images: Record<TemplateId, string>;
  /** Starts a container for the pool (the environment's own spec, on the warm-pool network). */
  start(workload: string, image: string, agentToken: string | null, signal: AbortSignal): Promise<Applied>;
  /** Whether pool containers get an agent (environments.ts). */
  agentSupported(): Promise<boolean>;
  /** A container was taken or became ready: top the pool up soon (the caller runs refill under its lease). */
  taken(): void;
  controller: WorkloadController;
}

/** A hand-over still unfinished after this long was left by a dead svcd (so is a starting row of before the controller). */
const STALE_S = 600;

export interface ClaimedWorkload {
  workload: string;
  containerId: string;
  address: string | null;
  /** Its agent's token, sealed, for the environment's record. */
  agentToken: string | null;
}

/** What a WarmPool is built from, by name. */
export interface WarmPoolDeps extends WarmPoolOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'clock' | 'log'> {}

export class WarmPool implements WorkloadRules {
  private inFlight: Promise<void> | null = null;
  private again = false;

  constructor(private readonly deps: WarmPoolDeps) {
    deps.controller.handle('warm', this);
  }

  /** A ready container of the template, now on the tenant's network; null when none is ready. */
  async claim(templateId: TemplateId, tenantId: string): Promise<ClaimedWorkload | null> {
    for (const w of await this.deps.store.warmPool.ready(templateId, this.deps.images[templateId])) {
      // Its workload row goes with the claim: no controller restarts or removes it from now on.
      // One a controller works on (reconcile found it stopped) is left to it. The workload row
      // first, as in every transaction that writes both.
      const claimed = await this.deps.store
        .transaction(async (tx) => {
          if (!(await tx.workloads.forgetSettled('warm', w.workload))) return false; // another create took it, or a controller has it
          if (!(await tx.warmPool.claim(w.workload, unixSeconds(this.deps.clock)))) throw new NotClaimable();
          return true;
        })
        .catch((err: unknown) => {
          if (err instanceof NotClaimable) return false;
          throw err;
        });
      if (!claimed) continue;
      try {
        const address = await this.deps.runtime.assign(w.container_id, tenantId);
        this.deps.taken();
        // Its pool row stays `claimed` until the environment's transaction takes it over.
        return { workload: w.workload, containerId: w.container_id, address, agentToken: w.agent_token };
      } catch (err) {
        this.deps.log.warn({ err, workload: w.workload }, 'a warm environment could not be handed over; discarded');
        await this.removeClaimed(w.workload);
      }
    }
    return null;
  }

  /**
   * Tops every template up to the pool size (a periodic job under its store lease, which keeps
   * other svcd processes out; within this one, a refill asked for while one runs runs after it).
   * It only writes rows: the controller starts the containers, one per template at a time
   * (starting one takes both cores here for a moment).
   */
  refill(): Promise<void> {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    this.inFlight = (async () => {
      do {
        this.again = false;
        await this.fill();
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by a refill() during the fill
      } while (this.again);
    })().finally(() => (this.inFlight = null));
    return this.inFlight;
  }

  private async fill(): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const rows = await this.deps.store.warmPool.all();
    for (const w of rows) {
      const stale = (w.claimed_at ?? w.created_at) < now - STALE_S;
      if (w.status === 'claimed') {
        // A hand-over a dead svcd did not finish: the container goes unless an environment has it.
        if (stale && !(await this.deps.store.environments.usesWorkload(w.workload))) await this.removeClaimed(w.workload);
        else if (stale) await this.deps.store.warmPool.delete(w.workload);
        continue;
      }
      // An image flag changed, or the pool shrank: what is not wanted any more goes.
      const outdated = w.image !== this.deps.images[w.template_id as TemplateId] || this.deps.size === 0;
      // A starting row with no workload row is from a svcd of before the controller.
      const orphaned = w.status === 'starting' && stale && !(await this.deps.store.workloads.find('warm', w.workload));
      if (outdated || orphaned) await this.discard(w.workload);
    }
    await this.removeStrays(new Set(rows.map((w) => w.workload)));
    if (this.deps.size === 0) return;
    const kept = await this.deps.store.warmPool.all();
    let added = false;
    for (const templateId of TEMPLATE_IDS) {
      const ofTemplate = kept.filter((w) => w.template_id === templateId && w.status !== 'claimed');
      if (ofTemplate.length >= this.deps.size || ofTemplate.some((w) => w.status === 'starting')) continue;
      const workload = `svc-env-${hexId(12)}`;
      const spec: WorkloadSpecRecord = { name: workload, volumes: [workload] };
      const token = (await this.deps.agentSupported()) ? this.deps.sealer.seal(newAgentToken()) : null;
      await this.deps.store.transaction(async (tx) => {
        await tx.warmPool.insert({ workload, template_id: templateId, image: this.deps.images[templateId], container_id: '', status: 'starting', created_at: now, claimed_at: null, agent_token: token });
        await tx.workloads.insertPending({ id: workload, tenant_id: WARM_POOL_TENANT, kind: 'warm', resource_id: workload, spec: JSON.stringify(spec) }, now);
      });
      added = true;
    }
    if (added) this.deps.controller.kick();
  }

  /** Starts a pool container of its row's template (ready once its agent answers; without one, after a first engine exec). */
  async apply(w: WorkloadRow, signal: AbortSignal): Promise<Applied> {
    const row = await this.deps.store.warmPool.find(w.resource_id);
    if (!row) throw new Error('the warm pool row is gone');
    const applied = await this.deps.start(parseSpecRecord(w).name, row.image, row.agent_token === null ? null : this.deps.sealer.open(row.agent_token), signal);
    // Its agent answered before start resolved (readiness). Without one (a row of before agents),
    // one command first: the first engine exec in a new container (under gVisor above all) is
    // slower than the rest, and it is paid here rather than by the tenant.
    if (row.agent_token === null) await this.deps.runtime.exec(applied.ref, { cmd: ['true'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 });
    return applied;
  }

  async observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    switch (outcome.state) {
      case 'running':
        await tx.warmPool.markReady(w.resource_id, outcome.applied.ref);
        // The next one of its template may start.
        tx.afterCommit(() => this.deps.taken());
        return;
      case 'failed':
        // Not tried again: the next refill starts another (a template image that cannot run keeps failing, logged).
        await tx.workloads.request('warm', w.resource_id, 'absent', unixSeconds(this.deps.clock));
        await tx.warmPool.delete(w.resource_id);
        return;
      case 'waiting':
      case 'stopped':
      case 'absent':
        return;
    }
  }

  /** A pool container not taken: it goes with its workload (the controller removes it and its volume). */
  private async discard(workload: string): Promise<void> {
    await this.deps.store.transaction(async (tx) => {
      await tx.workloads.request('warm', workload, 'absent', unixSeconds(this.deps.clock));
      await tx.warmPool.delete(workload);
    });
    this.deps.controller.kick();
  }

  /**
   * Containers labelled for the pool that nothing owns: no pool row (listed before them), no
   * `warm` workload row, no environment running on them, no workload observed on them (an
   * environment deleted a moment ago keeps its row until the controller has removed it), such as
   * a hand-over whose svcd died between the claim and its end, or a removal that failed. The
   * controller's orphan removal leaves the pool's containers to the pool.
   */
  private async removeStrays(listed: Set<string>): Promise<void> {
    for (const c of await this.deps.runtime.list({ tenantId: WARM_POOL_TENANT })) {
      if (listed.has(c.name) || (await this.deps.store.warmPool.find(c.name))) continue;
      if ((await this.deps.store.workloads.find('warm', c.name)) || (await this.deps.store.environments.usesWorkload(c.name))) continue;
      if (await this.deps.store.workloads.findByDriverRef(c.id)) continue;
      await this.removeClaimed(c.name);
      this.deps.log.info({ container: c.id, workload: c.name }, 'removed a warm-pool container nothing owns');
    }
  }

  /** A claimed container no environment got: its workload row went with the claim, so it is removed here. */
  private async removeClaimed(workload: string): Promise<void> {
    await this.deps.runtime.remove(workload).catch(() => {});
    await this.deps.runtime.removeVolume(workload).catch(() => {});
    await this.deps.store.warmPool.delete(workload);
  }
}

/** Rolls back a claim of a pool container whose workload a controller works on. */
class NotClaimable extends Error {}
