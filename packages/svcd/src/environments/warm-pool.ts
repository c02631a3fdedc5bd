// The warm pool: per template, a few environment containers started ahead of time and owned by
// no tenant, on svc's internal warm-pool network (no way out, no way to each other). A create
// claims one under a conditional update in the store, so two creates (or two svcd processes)
// never get the same one, and moves it onto the tenant's network: the environment runs at once.
// A claimed container has never run anything, so there is no state to reset; the pool is
// refilled in the background.
import type { TemplateId } from '@svc/contract';
import { TEMPLATE_IDS } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { hexId } from '../ids.js';
import type { Platform } from '../platform.js';

export interface WarmPoolOptions {
  /** Ready containers to keep per template. */
  size: number;
  images: Record<TemplateId, string>;
  /** Starts a container for the pool (the environment's own spec, on the warm-pool network). */
  start(workload: string, image: string): Promise<string>;
  /** A container was taken: top the pool up soon (the caller runs refill under its lease). */
  taken(): void;
}

/** A pool container still starting (or being handed over) after this long was left by a dead svcd. */
const STARTING_STALE_S = 600;

export interface ClaimedWorkload {
  workload: string;
  containerId: string;
  address: string | null;
}

/** What a WarmPool is built from, by name. */
export interface WarmPoolDeps extends WarmPoolOptions, Pick<Platform, 'store' | 'runtime' | 'clock' | 'log'> {}

export class WarmPool {
  private inFlight: Promise<void> | null = null;
  private again = false;

  constructor(private readonly deps: WarmPoolDeps) {}

  /** A ready container of the template, now on the tenant's network; null when none is ready. */
  async claim(templateId: TemplateId, tenantId: string): Promise<ClaimedWorkload | null> {
    for (const w of await this.deps.store.warmPool.ready(templateId, this.deps.images[templateId])) {
      if (!(await this.deps.store.warmPool.claim(w.workload))) continue; // another create took it
      try {
        const address = await this.deps.runtime.assign(w.container_id, tenantId);
        await this.deps.store.warmPool.delete(w.workload);
        this.deps.taken();
        return { workload: w.workload, containerId: w.container_id, address };
      } catch (err) {
        this.deps.log.warn({ err, workload: w.workload }, 'a warm environment could not be handed over; discarded');
        await this.discard(w.workload);
      }
    }
    return null;
  }

  /**
   * Tops every template up to the pool size (a periodic job under its store lease, which keeps
   * other svcd processes out; within this one, a refill asked for while one runs runs after it).
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
    for (const w of await this.deps.store.warmPool.all()) {
      const stale = w.created_at < now - STARTING_STALE_S;
      if (w.status === 'claimed') {
        // A hand-over a dead svcd did not finish: the container goes unless an environment has it.
        if (stale && !(await this.deps.store.environments.usesWorkload(w.workload))) await this.discard(w.workload);
        else if (stale) await this.deps.store.warmPool.delete(w.workload);
        continue;
      }
      // An image flag changed, or the pool shrank: what is not wanted any more goes.
      const outdated = w.image !== this.deps.images[w.template_id as TemplateId] || this.deps.size === 0;
      if (outdated || (w.status === 'starting' && stale)) await this.discard(w.workload);
    }
    if (this.deps.size === 0) return;
    const kept = await this.deps.store.warmPool.all();
    for (const templateId of TEMPLATE_IDS) {
      const image = this.deps.images[templateId];
      const have = kept.filter((w) => w.template_id === templateId && w.status !== 'claimed').length;
      for (let i = have; i < this.deps.size; i++) {
        const workload = `svc-env-${hexId(12)}`;
        await this.deps.store.warmPool.insert({ workload, template_id: templateId, image, container_id: '', status: 'starting', created_at: now });
        try {
          const containerId = await this.deps.start(workload, image);
          // One command first: the first exec in a new container (under gVisor above all) is
          // slower than the rest, and it is paid here rather than by the tenant.
          await this.deps.runtime.exec(containerId, { cmd: ['true'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 });
          await this.deps.store.warmPool.markReady(workload, containerId);
        } catch (err) {
          this.deps.log.warn({ err, template: templateId }, 'a warm environment could not be started');
          await this.discard(workload);
          break;
        }
      }
    }
  }

  private async discard(workload: string): Promise<void> {
    await this.deps.runtime.remove(workload).catch(() => {});
    await this.deps.runtime.removeVolume(workload).catch(() => {});
    await this.deps.store.warmPool.delete(workload);
  }
}
