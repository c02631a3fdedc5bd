// The base images a build will most likely name, pulled by their full names before its source is
// in: the images the service's previous build named, or for its first build those of the
// tenant's latest (a tenant's services often share a base image). A build waits for its
// Dockerfile's pulls only after its source is in (cloned or unpacked); a pull begun then bounded
// its start by 20-30 ms on an uploaded directory (README, Performance > Build).
//
// An upload begins them (warm): a build of it follows within tens of milliseconds, on this svcd
// most likely. The build takes what was warmed for its tenant (forBuild), and begins the rest
// itself. What is warmed is a hint kept in this process, not ownership: a build on another svcd
// pulls for itself, and a warmed pull no build took is stopped after WARM_KEPT_MS.
//
// Bounded, since an upload costs a tenant little (one that is refused later still warms): at most
// PREFETCHED_IMAGES_MAX pulls of a tenant kept at once, WARMED_MAX in all, and an image whose
// warmed pull no build took is not warmed again for the tenant for UNTAKEN_REST_MS (each of its
// pulls asks its registry, whose rate limits the host's tenants share).
import type { Clock, TimerHandle, Timers } from '../clock.js';
import type { ImagePuller } from '../services/images.js';
import { canonicalImageReference, isLocallyBuilt, pullTenantImage, tenantImageRefusal } from '../services/images.js';
import type { Store } from '../store/index.js';
import type { RecentPulls } from './recent-pulls.js';

/** How many of the previous build's base images are pulled ahead (a Dockerfile names a few); also a tenant's warmed pulls at once. */
const PREFETCHED_IMAGES_MAX = 3;
/** Warmed pulls this svcd keeps at once, whatever the tenants. */
const WARMED_MAX = 100;
/**
 * A warmed pull no build took within this long is stopped: the upload's build never came, or came
 * so much later (a slow upload) that it pulls for itself, as the rule asks of a build.
 */
const WARM_KEPT_MS = 10_000;
/** How long an image whose warmed pull went untaken is not warmed again for the tenant (its builds still pull it). */
const UNTAKEN_REST_MS = 60_000;

/** A pull that ended: the name the engine holds the image under, the ID of the copy it left (read right after it), and when. */
export interface PulledImage {
  name: string;
  id: string;
  at: number;
}

/** An image's pull: resolves to what it left, or null when it failed (the build pulls again, and reports its error). */
export type PrefetchedPulls = Map<string, Promise<PulledImage | null>>;

interface Warmed {
  tenantId: string;
  pull: Promise<PulledImage | null>;
  stop: AbortController;
  expiry: TimerHandle;
}

export interface BaseImagePrefetchDeps {
  store: Pick<Store, 'builds'>;
  runtime: ImagePuller & { baseImage(image: string): Promise<{ id: string }> };
  clock: Clock;
  timers: Timers;
  buildRegistry: string | null;
  /** A build uses the tenant's recent pull of an image again (recent-pulls.ts): nothing to pull ahead. */
  recent: Pick<RecentPulls, 'recent'>;
}

/** A warmed pull's place: what one tenant warmed is never another's. */
function warmedKey(tenantId: string, image: string): string {
  return `${tenantId} ${image}`;
}

export class BaseImagePrefetch {
  /** Pulls uploads began, by tenant and image (`tenantId image`). */
  private readonly warmed = new Map<string, Warmed>();
  /** Tenant and image whose warmed pull no build took, until they may be warmed again. */
  private readonly resting = new Map<string, TimerHandle>();
  private closed = false;

  constructor(private readonly deps: BaseImagePrefetchDeps) {}

  /** Begins the pulls for a build of the service that is likely to follow (its source is being uploaded). Never rejects. */
  async warm(tenantId: string, serviceId: string): Promise<void> {
    const images = await this.guess(tenantId, serviceId);
    // Looked at after the store's answer: svcd may have begun to close meanwhile.
    for (const image of images) {
      const key = warmedKey(tenantId, image);
      if (this.closed || this.warmed.has(key) || this.resting.has(key)) continue;
      if (this.warmed.size >= WARMED_MAX || this.warmedFor(tenantId) >= PREFETCHED_IMAGES_MAX) return;
      const stop = new AbortController();
      const pull = this.pull(image, stop.signal);
      const expiry = this.deps.timers.setTimeout(() => {
        this.warmed.delete(key);
        stop.abort(new Error('no build took this pull'));
        this.resting.set(key, this.deps.timers.setTimeout(() => this.resting.delete(key), UNTAKEN_REST_MS));
      }, WARM_KEPT_MS);
      this.warmed.set(key, { tenantId, pull, stop, expiry });
    }
  }

  /**
   * The pulls for a build of the service, begun now or taken from an upload's warm-up: each ends
   * with `signal` (the build's end) unless it finished. Never rejects: it is awaited only after
   * the source is in, and a guess that cannot be read is no guess.
   */
  async forBuild(tenantId: string, serviceId: string, signal: AbortSignal): Promise<PrefetchedPulls> {
    const pulls: PrefetchedPulls = new Map();
    for (const image of await this.guess(tenantId, serviceId)) {
      const key = warmedKey(tenantId, image);
      const warmed = this.warmed.get(key);
      if (warmed) {
        this.warmed.delete(key);
        warmed.expiry.cancel();
        // The build owns it now: it ends with the build, as one the build began.
        if (signal.aborted) warmed.stop.abort(signal.reason);
        else signal.addEventListener('abort', () => warmed.stop.abort(signal.reason), { once: true });
        pulls.set(image, warmed.pull);
      } else {
        pulls.set(image, this.pull(image, signal));
      }
    }
    return pulls;
  }

  /** Stops every warmed pull, and warms nothing more (svcd closes). */
  close(): void {
    this.closed = true;
    for (const w of this.warmed.values()) {
      w.expiry.cancel();
      w.stop.abort(new Error('svcd is closing'));
    }
    this.warmed.clear();
    for (const rest of this.resting.values()) rest.cancel();
    this.resting.clear();
  }

  /**
   * One pull, and the ID of the copy it left read right after it: the build checks later (after
   * its clone) that the name still holds that copy, and pulls again when it does not.
   */
  private pull(image: string, signal: AbortSignal): Promise<PulledImage | null> {
    return pullTenantImage(this.deps.runtime, image, signal)
      .then(async (name) => ({ name, id: (await this.deps.runtime.baseImage(name)).id, at: this.deps.clock.now() }))
      .catch(() => null);
  }

  private warmedFor(tenantId: string): number {
    let n = 0;
    for (const w of this.warmed.values()) if (w.tenantId === tenantId) n++;
    return n;
  }

  /** The images the service's (or the tenant's) latest build named that the tenant may still use, pulled from a registry. */
  private async guess(tenantId: string, serviceId: string): Promise<string[]> {
    const last = await this.deps.store.builds.lastBaseImages(tenantId, serviceId).catch(() => undefined);
    let images: unknown;
    try {
      images = last === undefined ? [] : JSON.parse(last);
    } catch {
      return [];
    }
    if (!Array.isArray(images)) return [];
    const guessed = new Set<string>();
    for (const image of images.slice(0, PREFETCHED_IMAGES_MAX)) {
      if (typeof image !== 'string' || isLocallyBuilt(image)) continue;
      // Judged again under today's rules (--build-registry may have changed): what the tenant may not use is not pulled for it.
      if (tenantImageRefusal(image, { tenantId, buildRegistry: this.deps.buildRegistry }) !== null) continue;
      // Pulled a moment ago by the tenant: the build uses that pull again, unless the engine's copy
      // changed (it pulls then). Pulled ahead all the same when the window could end before the build comes.
      if (this.deps.recent.recent(tenantId, canonicalImageReference(image), WARM_KEPT_MS) !== null) continue;
      guessed.add(image);
    }
    return [...guessed];
  }
}
