// The warm pool: per template, a few environment containers started ahead of time and owned by
// no tenant, on svc's internal warm-pool network (no way out, no way to each other). Each is a
// workload of the `warm` kind: the refill (a periodic job) writes its pool row and its workload
// row in one transaction, and the workload controller of any svcd starts it (a svcd dying
// midway is taken over like any workload). A create claims a ready one under a conditional
// update in the store, so two creates (or two svcd processes) never get the same one; from the
// claim on it is the environment's (its `warm` row goes in the claim's transaction), moved onto
// the tenant's network: the environment runs at once. A claimed container has run nothing but
// svc's own first `true`, so there is no state to reset.
//
// The move onto the tenant's network is the engine's network connect, ~50 ms here, and a
// command needs its network: so a tenant that took a container of a template gets the next one
// of it kept for it, started on that tenant's network already (--env-warm-reserve of them in
// all, each for 10 minutes), and its next create of that template hands it over with no engine
// call at all. A kept container is still the pool's (labelled so, running nothing of the
// tenant's) but a workload of its own kind, `warm-kept`, with a status of its own, `kept`: an
// svcd of before them (an upgrade under way) neither starts one nor offers it to anyone. It is
// never handed to another tenant, and goes at the next refill once its tenant is suspended.
import type { TemplateId } from '@svc/contract';
import { TEMPLATE_IDS } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { hexId } from '../ids.js';
import { WARM_POOL_TENANT, isEngineFault, type Applied } from '../runtime/index.js';
import type { Repositories, WarmEnvironmentRow, WorkloadRow } from '../store/index.js';
import { parseSpecRecord, type WorkloadController, type WorkloadOutcome, type WorkloadRules, type WorkloadSpecRecord } from '../workloads/controller.js';
import type { Platform } from '../platform.js';
import { agentAddress, execThroughAgent, newAgentToken } from './agent.js';

export interface WarmPoolOptions {
  /** Ready containers to keep per template. */
  size: number;
  images: Record<TemplateId, string>;
  /** Containers kept for tenants, at most, in all (--env-warm-reserve). */
  kept: number;
  /** Starts a container for the pool (the environment's own spec): on the warm-pool network, or on the network of the tenant it is kept for. */
  start(workload: string, image: string, agentToken: string | null, keptFor: string | null, signal: AbortSignal): Promise<Applied>;
  /** Whether pool containers get an agent (environments.ts). */
  agentSupported(): Promise<boolean>;
  /** A container was taken or became ready: top the pool up soon (the caller runs refill under its lease). */
  taken(): void;
  controller: WorkloadController;
}

/** A hand-over still unfinished after this long was left by a dead svcd (so is a starting row of before the controller). */
const STALE_S = 600;
/** A container kept for a tenant and not taken within this goes (the tenant stopped creating): 10 minutes. */
export const KEPT_IDLE_S = 600;

export interface ClaimedWorkload {
  workload: string;
  containerId: string;
  address: string | null;
  /** Its agent's token, sealed, for the environment's record. */
  agentToken: string | null;
  /**
   * Keeps the next container of the template for the tenant, in the transaction that hands this
   * one over (so a hand-over that fails keeps nothing).
   */
  keepNext(tx: Repositories): Promise<void>;
}

/** The workload kind of a pool row: the shared pool's, or one kept for a tenant. */
function kindOf(w: Pick<WarmEnvironmentRow, 'tenant_id'>): 'warm' | 'warm-kept' {
  return w.tenant_id === null ? 'warm' : 'warm-kept';
}

/** What a WarmPool is built from, by name. */
export interface WarmPoolDeps extends WarmPoolOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'clock' | 'timers' | 'log'> {}

export class WarmPool implements WorkloadRules {
  private inFlight: Promise<void> | null = null;
  private again = false;

  constructor(private readonly deps: WarmPoolDeps) {
    deps.controller.handle('warm', this);
    deps.controller.handle('warm-kept', this);
  }

  /** A ready container of the template, now on the tenant's network; null when none is ready. */
  async claim(templateId: TemplateId, tenantId: string): Promise<ClaimedWorkload | null> {
    // The agent token of the next one, should one be kept for this tenant: made outside any
    // transaction, and only when the pool keeps any (this is a create's path).
    const keptToken = this.keeps() && (await this.deps.agentSupported()) ? this.deps.sealer.seal(newAgentToken()) : null;
    const keepNext = (tx: Repositories) => this.keepNext(tx, templateId, tenantId, keptToken);
    for (const w of await this.deps.store.warmPool.ready(templateId, this.deps.images[templateId], tenantId)) {
      // Its workload row goes with the claim: no controller restarts or removes it from now on.
      // One a controller works on (reconcile found it stopped) is left to it. The workload row
      // first, as in every transaction that writes both.
      const claimed = await this.deps.store
        .transaction(async (tx) => {
          if (!(await tx.workloads.forgetSettled(kindOf(w), w.workload))) return false; // another create took it, or a controller has it
          if (!(await tx.warmPool.claim(w.workload, unixSeconds(this.deps.clock)))) throw new NotClaimable();
          return true;
        })
        .catch((err: unknown) => {
          if (err instanceof NotClaimable) return false;
          throw err;
        });
      if (!claimed) continue;
      try {
        // One kept for this tenant is on its network already (ready() gives no one kept for another).
        const address = w.tenant_id === tenantId ? (w.address ?? (await this.deps.runtime.inspect(w.container_id))?.address?.host ?? null) : await this.deps.runtime.assign(w.container_id, tenantId);
        this.deps.taken();
        // Its pool row stays `claimed` until the environment's transaction takes it over.
        return { workload: w.workload, containerId: w.container_id, address, agentToken: w.agent_token, keepNext };
      } catch (err) {
        this.deps.log.warn({ err, workload: w.workload }, 'a warm environment could not be handed over; discarded');
        await this.removeClaimed(w.workload, tenantId);
        // The engine away: the next ones would fail the same way, and each would be lost to the pool.
        if (isEngineFault(err)) return null;
      }
    }
    return null;
  }

  /**
   * The next container of the template is kept for the tenant that took one, unless one is kept
   * for it already or about --env-warm-reserve are kept in all (two claims at once may both pass
   * the count: the refill holds the number it starts to the flag); the refill starts it a
   * second later, after the new owner's first commands.
   */
  private async keepNext(tx: Repositories, templateId: TemplateId, tenantId: string, token: string | null): Promise<void> {
    if (!this.keeps()) return;
    if ((await tx.warmPool.keptCount()) >= this.deps.kept) return;
    const workload = `svc-env-${hexId(12)}`;
    await tx.warmPool.keep({ workload, template_id: templateId, image: this.deps.images[templateId], container_id: '', status: 'reserved', created_at: unixSeconds(this.deps.clock), claimed_at: null, agent_token: token, tenant_id: tenantId, address: null });
  }

  /** Whether containers are kept for tenants at all (--env-warm-reserve, with a pool). */
  private keeps(): boolean {
    return this.deps.kept > 0 && this.deps.size > 0;
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
        if (stale && !(await this.deps.store.environments.usesWorkload(w.workload))) await this.removeClaimed(w.workload, w.tenant_id);
        else if (stale) await this.deps.store.warmPool.delete(w.workload);
        continue;
      }
      // An image flag changed, or the pool shrank: what is not wanted any more goes.
      const outdated = w.image !== this.deps.images[w.template_id as TemplateId] || this.deps.size === 0 || (w.tenant_id !== null && this.deps.kept === 0);
      // A starting row with no workload row is from a svcd of before the controller.
      const orphaned = w.status === 'starting' && stale && !(await this.deps.store.workloads.find(kindOf(w), w.workload));
      if (outdated || orphaned || (await this.keptNoLonger(w, now))) await this.discard(w);
    }
    await this.removeStrays(new Set(rows.map((w) => w.workload)));
    if (this.deps.size === 0) return;
    const rowsNow = await this.deps.store.warmPool.all();
    let added = false;
    for (const templateId of TEMPLATE_IDS) {
      const ofTemplate = rowsNow.filter((w) => w.template_id === templateId && w.tenant_id === null && w.status !== 'claimed');
      if (ofTemplate.length >= this.deps.size || ofTemplate.some((w) => w.status === 'starting')) continue;
      const workload = `svc-env-${hexId(12)}`;
      const spec: WorkloadSpecRecord = { name: workload, volumes: [workload] };
      const token = (await this.deps.agentSupported()) ? this.deps.sealer.seal(newAgentToken()) : null;
      await this.deps.store.transaction(async (tx) => {
        await tx.warmPool.insert({ workload, template_id: templateId, image: this.deps.images[templateId], container_id: '', status: 'starting', created_at: now, claimed_at: null, agent_token: token, tenant_id: null, address: null });
        await tx.workloads.insertPending({ id: workload, tenant_id: WARM_POOL_TENANT, kind: 'warm', resource_id: workload, spec: JSON.stringify(spec) }, now);
      });
      added = true;
    }
    // Kept ones, one starting at a time (each takes both cores here for a moment), oldest wish
    // first; a wish past --env-warm-reserve started or running (two claims at once) goes.
    const wished = rowsNow.filter((w) => w.status === 'reserved').sort((a, b) => a.created_at - b.created_at)[0];
    const live = rowsNow.filter((w) => w.tenant_id !== null && (w.status === 'starting' || w.status === 'kept')).length;
    if (wished && live >= this.deps.kept) await this.deps.store.warmPool.delete(wished.workload);
    else if (wished && !rowsNow.some((w) => w.tenant_id !== null && w.status === 'starting')) {
      const spec: WorkloadSpecRecord = { name: wished.workload, volumes: [wished.workload] };
      await this.deps.store
        .transaction(async (tx) => {
          // The workload row first, as in every transaction that writes both; under its tenant:
          // its removal gives the tenant's network up when nothing else is on it.
          await tx.workloads.insertPending({ id: wished.workload, tenant_id: wished.tenant_id ?? WARM_POOL_TENANT, kind: 'warm-kept', resource_id: wished.workload, spec: JSON.stringify(spec) }, now);
          if (!(await tx.warmPool.markStarting(wished.workload, now))) throw new NotClaimable(); // gone meanwhile: nothing written
        })
        .catch((err: unknown) => {
          if (!(err instanceof NotClaimable)) throw err;
        });
      added = true;
    }
    if (added) this.deps.controller.kick();
  }

  /**
   * A container kept for a tenant that is not wanted any more: its tenant suspended or gone, not
   * taken in time (the tenant stopped creating), or still starting long after (the engine
   * failing it again and again: it would hold up every other kept one, which start one at a time).
   */
  private async keptNoLonger(w: WarmEnvironmentRow, now: number): Promise<boolean> {
    if (w.tenant_id === null) return false;
    if ((await this.deps.store.tenants.findById(w.tenant_id))?.status !== 'active') return true;
    if (w.status === 'starting') return w.created_at < now - STALE_S;
    return w.status === 'kept' && w.created_at < now - KEPT_IDLE_S;
  }

  /** Starts a pool container of its row's template (ready once its agent answers and a first command ran). */
  async apply(w: WorkloadRow, signal: AbortSignal): Promise<Applied> {
    const row = await this.deps.store.warmPool.find(w.resource_id);
    if (!row) throw new Error('the warm pool row is gone');
    // Kept for a tenant suspended or deleted meanwhile: not started on its network (failed: the row goes).
    if (row.tenant_id !== null && (await this.deps.store.tenants.findById(row.tenant_id))?.status !== 'active') throw new Error('the tenant it was kept for is not active');
    const agentToken = row.agent_token === null ? null : this.deps.sealer.open(row.agent_token);
    const applied = await this.deps.start(parseSpecRecord(w).name, row.image, agentToken, row.tenant_id, signal);
    // Its agent answered before start resolved (readiness). Then one command: the first in a new
    // container (under gVisor above all: ~12 ms more than the next through the agent here, far
    // more through the engine) is slower than the rest, and it is paid here rather than by the
    // tenant. Through the agent when it has one (a row of before agents has none).
    const warmUp = { cmd: ['true'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 };
    if (agentToken === null) await this.deps.runtime.exec(applied.ref, warmUp);
    else await execThroughAgent(agentAddress(applied.endpoint.host, null, agentToken), warmUp, this.deps.timers);
    return applied;
  }

  async observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    switch (outcome.state) {
      case 'running':
        // A kept one is `kept`, not `ready`: an svcd of before kept ones offers it to no one.
        await tx.warmPool.markReady(w.resource_id, outcome.applied.ref, outcome.applied.endpoint.host || null, w.kind === 'warm-kept' ? 'kept' : 'ready');
        // The next one of its template may start.
        tx.afterCommit(() => this.deps.taken());
        return;
      case 'failed':
        // Not tried again: the next refill starts another (a template image that cannot run keeps failing, logged).
        await tx.workloads.request(w.kind, w.resource_id, 'absent', unixSeconds(this.deps.clock));
        await tx.warmPool.delete(w.resource_id);
        return;
      case 'waiting':
      case 'stopped':
      case 'absent':
        return;
    }
  }

  /** A pool container not taken: it goes with its workload (the controller removes it and its volume). */
  private async discard(w: WarmEnvironmentRow): Promise<void> {
    await this.deps.store.transaction(async (tx) => {
      await tx.workloads.request(kindOf(w), w.workload, 'absent', unixSeconds(this.deps.clock));
      await tx.warmPool.delete(w.workload);
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
      // One kept for a tenant whose pool row went (an svcd of before kept ones discarding it):
      // its workload goes, through the controller, which gives the tenant's network up after it.
      const kept = await this.deps.store.workloads.find('warm-kept', c.name);
      if (kept) {
        if (kept.desired_state !== 'absent') await this.deps.store.workloads.request('warm-kept', c.name, 'absent', unixSeconds(this.deps.clock));
        this.deps.controller.kick();
        continue;
      }
      if (await this.deps.store.workloads.findByDriverRef(c.id)) continue;
      // Whose network it may be on is not known here: the tenant's next removal gives it up.
      await this.removeClaimed(c.name, null);
      this.deps.log.info({ container: c.id, workload: c.name }, 'removed a warm-pool container nothing owns');
    }
  }

  /**
   * A claimed container no environment got: its workload row went with the claim, so it is
   * removed here, and the network of the tenant it was on (`tenantId`, when known) given up when
   * nothing else is on it, as the controller does after a removal.
   */
  async removeClaimed(workload: string, tenantId: string | null): Promise<void> {
    await this.deps.runtime.remove(workload).catch(() => {});
    await this.deps.runtime.removeVolume(workload).catch(() => {});
    if (tenantId !== null) await this.deps.runtime.releaseTenant(tenantId).catch(() => {});
    await this.deps.store.warmPool.delete(workload);
  }
}

/** Rolls back a claim of a pool container whose workload a controller works on. */
class NotClaimable extends Error {}
