// A tenant's pulls of its builds' base images, kept for a short while (--base-image-reuse, by
// default a minute), so that a build that follows soon after another does not ask the registry
// again: a pull of an image already up to date still took 14-30 ms of every build, before the
// engine could build anything (a deploy loop's builds follow each other within seconds; README,
// Performance > Build).
//
// What the pull proves stays proven: a record is the tenant's own, made only by a pull the tenant's
// build (or its upload's warm-up) got through, of that full name, once the build checked the copy
// it left, and it is used only while the engine still holds that copy under that name (a pull by
// someone else that moved the tag, or a copy loaded by hand, is not the one the tenant pulled: the
// build pulls again, and the record goes). The window counts from the end of the pull. What it
// gives up, for at most the reuse window: a tag moved in the registry meanwhile, or an image the
// registry no longer serves, is seen by the next build after it (Docker's own builder and the
// hosting platforms svc is compared with pull a base image only when it is missing).
//
// Kept in this process: a cache, not ownership. A build on another svcd has no record and pulls.
import type { Clock } from '../clock.js';

/** The default of --base-image-reuse. */
export const BASE_IMAGE_REUSE_S = 60;
/** Records kept at most, whatever the tenants (the oldest go first): a map bounded like any tenant-fed one. */
export const KEPT_MAX = 1_000;

interface Pulled {
  /** The ID of the copy the pull left, which the build checked (ONBUILD triggers, none). */
  id: string;
  /** When the pull ended (the window counts from it). */
  at: number;
}

export class RecentPulls {
  private readonly pulls = new Map<string, Pulled>();

  /** `reuseMs` 0: every build pulls (nothing is recorded). */
  constructor(
    private readonly clock: Clock,
    private readonly reuseMs: number,
  ) {}

  /**
   * The tenant's pull of `image` (its full name) that is recent enough to use again, with at least
   * `remainingMs` of its window left: the image ID it gave and how long ago; null when there is none.
   */
  recent(tenantId: string, image: string, remainingMs = 0): { id: string; ageMs: number } | null {
    const key = keyOf(tenantId, image);
    const pulled = this.pulls.get(key);
    if (!pulled) return null;
    const ageMs = this.clock.now() - pulled.at;
    // A clock that went back cannot tell the age: the record goes.
    if (ageMs >= this.reuseMs || ageMs < 0) {
      this.pulls.delete(key);
      return null;
    }
    return this.reuseMs - ageMs >= remainingMs ? { id: pulled.id, ageMs } : null;
  }

  /** The tenant pulled `image` at `at`, and the copy it left and the build checked was `id`. */
  pulled(tenantId: string, image: string, id: string, at: number): void {
    if (this.reuseMs <= 0) return;
    const key = keyOf(tenantId, image);
    // Last in the map's order: the oldest record is first, and goes first past the bound.
    this.pulls.delete(key);
    this.pulls.set(key, { id, at });
    if (this.pulls.size > KEPT_MAX) {
      const oldest = this.pulls.keys().next();
      if (!oldest.done) this.pulls.delete(oldest.value);
    }
  }

  /** The record no longer describes what the engine holds under the name: it goes, whatever the next pull does. */
  forget(tenantId: string, image: string): void {
    this.pulls.delete(keyOf(tenantId, image));
  }

  /** The window, for the build's log. */
  get reuseSeconds(): number {
    return Math.round(this.reuseMs / 1000);
  }
}

/** One tenant's record is never another's. */
function keyOf(tenantId: string, image: string): string {
  return `${tenantId} ${image}`;
}
