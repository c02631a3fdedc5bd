// Runs queued builds: clone (or unpack an upload), image build through the engine, then a
// deployment of the result.
//
// Like the other workers it takes its tick from the injected timers and can be closed. Every
// step that two svcd processes could race on goes through the store: a build is taken by moving
// it queued -> running with this process as holder (only one mover wins), the per-tenant
// concurrency is counted under a per-tenant lease, and a running build's lease is renewed while
// it runs. A build whose holder died (its lease ran out, or it was an earlier boot of this very
// instance) is marked failed with a clear error; queued builds are simply run.
import { randomUUID } from 'node:crypto';
import { lstatSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD_LOG_MAX_BYTES } from '@svc/contract';
import { type TimerHandle, type Timers, unixSeconds } from '../clock.js';
import { SANDBOX_RUNTIME } from '../runtime/index.js';
import { workloadLimits } from '../runtime/index.js';
import { canonicalImageReference, isLocallyBuilt, pullTenantImage } from '../services/images.js';
import type { Services } from '../services/services.js';
import type { BuildRow, Store } from '../store/index.js';
import { durationSince, type BuildExecution } from './builds.js';
import { cloneAt } from '../sources/git.js';
import { readArchive } from '../sources/archive.js';
import { ARCHIVE_LIMITS, storedArchive } from './source-uploads.js';
import { checkDockerfile, pinImages } from './dockerfile.js';
import type { BaseImagePrefetch, PrefetchedPulls } from './base-image-prefetch.js';
import type { RecentPulls } from './recent-pulls.js';
import type { SourceCheck } from '../sources/sources.js';
import type { ScratchArea, ScratchSpace } from '../scratch/scratch-space.js';
import type { Platform } from '../platform.js';
import { Wakeups } from '../wakeups.js';

export interface BuildRunnerOptions {
  /** Where clones live while their build runs, each reserving its maximum size of the budget. */
  scratch: ScratchSpace;
  /** Builds this process runs at once, whatever the tenants (the machine's share). */
  workers?: number;
  tickMs?: number;
  cloneMaxBytes?: number;
  /** The whole build: clone, image build and the start of its deployment. */
  deadlineMs?: number;
  leaseMs?: number;
  /** Push each built image to its registry (the tag names it: --build-registry). */
  pushBuilds?: boolean;
  /** CA bundle for HTTPS sources (system + --git-ca-file); null: the system's. */
  gitCaBundle?: string | null;
  /** --build-registry: its svc/<tenant>/ images belong to their tenants (Dockerfile FROM rule). */
  buildRegistry?: string | null;
  /** Whether tenant workloads run under gVisor now: then RUN steps must too. */
  sandbox?: () => Promise<boolean>;
  /**
   * The operator's rules for sources, as at create (Builds). A build is cloned minutes after it
   * was queued, maybe by another svcd, and names can point elsewhere by then: the source is
   * checked again right before the clone, and the clone takes what that check pinned.
   */
  checkSource: SourceCheck;
}

export const BUILD_WORKERS = 4;
export const BUILD_DEADLINE_MS = 30 * 60_000;
export const CLONE_MAX_BYTES = 500 * 1024 * 1024;
const TICK_MS = 1_000;
const LEASE_MS = 60_000;
/** How often a running build checks that it is still wanted (cancel from another process, service deleted). */
const WATCH_MS = 500;
/** Output is written to the store in batches: at most this often, or when this much is waiting. */
const LOG_FLUSH_MS = 200;
const LOG_FLUSH_BYTES = 64 * 1024;
const INTERRUPTED = 'interrupted: svcd stopped during this build; start a new build';
/** Successful builds of a service whose images are kept (the newest; see removeOldImages). */
export const BUILT_IMAGES_KEPT = 3;
/** A service keeps at most 200 build records (retention), a tenant at most 50 snapshots. */
const BUILDS_SCANNED_FOR_IMAGES = 200;
const SNAPSHOTS_SCANNED = 50;

interface Running {
  tenantId: string;
  controller: AbortController;
  done: Promise<void>;
}

const DOCKERFILE_MAX_BYTES = 1024 * 1024;

// The Dockerfile is read and written synchronously, as the scratch space is reserved: a file of
// at most a megabyte in svcd's own local directory. Asynchronous, each call waited for the thread
// pool and then for an event loop busy with the build's own requests (the upload, its log being
// followed): 3-4 ms of every build's way to the engine (bench/build).

/**
 * The repository's Dockerfile, which must be a regular file: svcd would follow a symlink on its
 * own host while the engine resolves it inside the build context, so the check and the build
 * would read different files. Bounded, so a huge file cannot fill svcd's memory.
 */
export function readDockerfile(dir: string): string {
  const path = join(dir, 'Dockerfile');
  let info;
  try {
    info = lstatSync(path);
  } catch {
    throw new Error('no Dockerfile at the root of the repository');
  }
  if (!info.isFile()) throw new Error('the Dockerfile must be a regular file (not a symlink or a directory)');
  if (info.size > DOCKERFILE_MAX_BYTES) throw new Error(`the Dockerfile is larger than ${DOCKERFILE_MAX_BYTES / 1024} KB`);
  return readFileSync(path, 'utf8');
}

/**
 * Writes the Dockerfile again with its images pinned to the checked copies (pinImages). Written
 * beside it and renamed over it, so that whatever is at that path is replaced, never written
 * through (it was read as a regular file; nothing of the tenant's runs in the scratch space).
 */
function pinDockerfile(dir: string, text: string, ids: ReadonlyMap<string, string>): void {
  if (ids.size === 0) return;
  const path = join(dir, 'Dockerfile');
  const written = join(dir, `.svc-dockerfile-${randomUUID()}`);
  writeFileSync(written, pinImages(text, ids), { flag: 'wx' });
  renameSync(written, path);
}

/** What a BuildRunner is built from, by name. */
export interface BuildRunnerDeps extends BuildRunnerOptions, Pick<Platform, 'store' | 'runtime' | 'activity' | 'clock' | 'timers' | 'log' | 'holder'> {
  services: Services;
  /** The base images a build most likely names, pulled while its source comes in (or since its upload began). */
  prefetch: Pick<BaseImagePrefetch, 'forBuild'>;
  /** The tenant's recent pulls of base images, used again for a while (--base-image-reuse). */
  recentPulls: Pick<RecentPulls, 'recent' | 'pulled' | 'forget' | 'reuseSeconds'>;
}

export class BuildRunner implements BuildExecution {
  private readonly running = new Map<string, Running>();
  /** Polls of a build's record (?wait) waiting to read it again, by build id. */
  private readonly buildEnds = new Wakeups();
  private ticker: TimerHandle | null = null;
  private ticking: Promise<void> | null = null;
  private again = false;
  private closed = false;
  private readonly workers: number;
  private readonly leaseMs: number;

  constructor(private readonly deps: BuildRunnerDeps) {
    this.workers = deps.workers ?? BUILD_WORKERS;
    this.leaseMs = deps.leaseMs ?? LEASE_MS;
  }

  /** Ticks (the scratch space has cleared what an earlier process left). */
  async start(): Promise<void> {
    this.ticker = this.deps.timers.setInterval(() => this.kick(), this.deps.tickMs ?? TICK_MS);
    this.kick();
    await this.ticking;
  }

  kick(): void {
    if (this.closed) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = (async () => {
      do {
        this.again = false;
        await this.tick().catch((err: unknown) => this.deps.log.error({ err }, 'build tick failed'));
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by a kick() during the tick
      } while (this.again && !this.closed);
    })().finally(() => (this.ticking = null));
  }

  abort(buildId: string, why: string): boolean {
    // Its record ended (or is no longer this process's to run): a wait on it reads it again now,
    // not once the run has unwound.
    this.buildEnds.wake(buildId);
    const r = this.running.get(buildId);
    if (!r) return false;
    r.controller.abort(new Error(why));
    return true;
  }

  nextChange(pauseMs: number, buildId: string, signal?: AbortSignal): Promise<void> {
    return this.buildEnds.pause(pauseMs, buildId, signal);
  }

  /** Stops the tick and every build this process runs; they end failed as interrupted (a restart would say the same). */
  async close(): Promise<void> {
    this.closed = true;
    this.ticker?.cancel();
    await this.ticking;
    for (const r of this.running.values()) r.controller.abort(new Error(INTERRUPTED));
    await Promise.all([...this.running.values()].map((r) => r.done));
  }

  /** Builds running here now (tests, health). */
  get active(): number {
    return this.running.size;
  }

  private async tick(): Promise<void> {
    await this.failOrphans();
    if (this.running.size >= this.workers) return;
    const queued = await this.deps.store.builds.listQueued(200);
    // Tenants in the order of their oldest queued build.
    const byTenant = new Map<string, BuildRow[]>();
    for (const b of queued) byTenant.set(b.tenant_id, [...(byTenant.get(b.tenant_id) ?? []), b]);
    // Round robin, one build per tenant per round, tenants with the fewest builds running here
    // first (then the longest waiting): a tenant with many queued builds takes turns with the
    // others instead of filling every free worker, and never holds more than its share.
    for (let round = true; round; ) {
      round = false;
      const turns = [...byTenant].sort(([a], [b]) => this.runningFor(a) - this.runningFor(b));
      for (const [tenantId, builds] of turns) {
        if (this.running.size >= this.workers || this.closed) return;
        if (builds.length === 0 || this.runningFor(tenantId) >= this.tenantShare) continue;
        const taken = await this.startForTenant(tenantId, builds, 1);
        builds.splice(0, taken);
        if (taken > 0) round = true;
      }
    }
  }

  /**
   * Workers of this process one tenant may hold: all but one, so that another tenant's build can
   * always start here within a tick, however many builds the first one queued.
   */
  private get tenantShare(): number {
    return Math.max(1, this.workers - 1);
  }

  private runningFor(tenantId: string): number {
    let n = 0;
    for (const r of this.running.values()) if (r.tenantId === tenantId) n++;
    return n;
  }

  /**
   * Running builds whose holder is gone: failed, with the reason. Builds held by this very
   * process that it does not run (claimed, then a step before their start failed) are orphans too.
   */
  private async failOrphans(): Promise<void> {
    const instance = this.deps.holder.split('/')[0];
    const now = this.deps.clock.now();
    for (const b of await this.deps.store.builds.listRunning()) {
      if (b.holder === this.deps.holder) {
        if (!this.running.has(b.id)) await this.finish(b, 'failed', INTERRUPTED, null);
        continue;
      }
      const earlierBootOfMine = b.holder !== null && b.holder.startsWith(`${instance}/`);
      const leaseGone = b.lease_until_ms === null || b.lease_until_ms < now;
      if (!earlierBootOfMine && !leaseGone) continue;
      await this.finish(b, 'failed', INTERRUPTED, null);
    }
  }

  /**
   * Starts up to `limit` of the tenant's queued builds, in order, within its concurrency quota;
   * answers how many of `queued` it went through (started, or taken by another svcd meanwhile).
   */
  private async startForTenant(tenantId: string, queued: BuildRow[], limit: number): Promise<number> {
    // The count and the claims under one per-tenant lease: two processes cannot both see a free slot.
    const lock = `builds:${tenantId}`;
    if (!(await this.deps.store.jobLocks.tryAcquire(lock, this.deps.holder, this.deps.clock.now(), 30_000))) return 0;
    let taken = 0;
    let started = 0;
    try {
      const tenant = await this.deps.store.tenants.findById(tenantId);
      if (!tenant || tenant.status !== 'active') return 0;
      let runningForTenant = await this.deps.store.builds.countWithStatus(tenantId, 'running');
      for (const b of queued) {
        if (started >= limit || runningForTenant >= tenant.max_builds_concurrent || this.running.size >= this.workers || this.closed) return taken;
        // Room for the whole clone first: without it the build stays queued until a clone ends.
        const area = this.deps.scratch.reserve('builds', b.id, this.deps.cloneMaxBytes ?? CLONE_MAX_BYTES);
        if (!area) return taken;
        const startedMs = this.deps.clock.now();
        const claimed = await this.deps.store.builds
          .transition(b.id, ['queued'], {
            status: 'running',
            holder: this.deps.holder,
            lease_until_ms: startedMs + this.leaseMs,
            started_at: unixSeconds(this.deps.clock),
          })
          .catch(async (err: unknown) => {
            await area.release();
            throw err;
          });
        taken++;
        if (!claimed) {
          await area.release();
          continue;
        }
        started++;
        runningForTenant++;
        // Launched at once: from here on the build's own bookkeeping ends it, whatever fails next.
        this.launch({ ...b, status: 'running', holder: this.deps.holder, started_at: unixSeconds(this.deps.clock) }, startedMs, area);
        await this.deps.activity
          .record(this.deps.store, { tenantId, action: 'build.started', resourceType: 'build', resourceId: b.id, serviceId: b.service_id })
          .catch((err: unknown) => this.deps.log.warn({ err, build: b.id }, 'could not record the start of a build'));
      }
      return taken;
    } finally {
      await this.deps.store.jobLocks.release(lock, this.deps.holder);
    }
  }

  private launch(b: BuildRow, startedMs: number, area: ScratchArea): void {
    const controller = new AbortController();
    const deadline = this.deps.timers.setTimeout(() => controller.abort(new Error(`build took longer than ${Math.round((this.deps.deadlineMs ?? BUILD_DEADLINE_MS) / 60_000)} minutes`)), this.deps.deadlineMs ?? BUILD_DEADLINE_MS);
    const done = this.run(b, startedMs, controller.signal, area.dir)
      .catch((err: unknown) => this.deps.log.error({ err, build: b.id }, 'build bookkeeping failed'))
      .finally(async () => {
        deadline.cancel();
        // What the build started and did not wait for (base images pulled ahead and not used) ends with it.
        controller.abort(new Error('the build ended'));
        await area.release().catch((err: unknown) => this.deps.log.warn({ err, build: b.id }, 'could not remove a clone'));
        // The uploaded archive has been built (or failed to): it is not kept (retention removes it should this fail).
        if (b.source_id !== null) await this.deps.store.sourceArchives.delete(b.source_id).catch((err: unknown) => this.deps.log.warn({ err, build: b.id }, 'could not remove an uploaded archive'));
        this.running.delete(b.id);
        this.kick(); // a slot is free
      });
    this.running.set(b.id, { tenantId: b.tenant_id, controller, done });
  }

  /**
   * RUN steps run with the engine's default runtime (the classic builder names none), so when
   * tenant workloads are sandboxed that default must be gVisor too (scripts/ensure-docker.sh sets
   * it); otherwise a build would have more privilege than the tenant's services: refuse it.
   * Resolves to the line for the build's log, or null when workloads are not sandboxed.
   */
  private async checkBuildSandbox(): Promise<string | null> {
    if (!(await (this.deps.sandbox?.() ?? Promise.resolve(false)))) return null;
    const stepRuntime = await this.deps.runtime.stepRuntime();
    if (stepRuntime !== SANDBOX_RUNTIME) {
      throw new Error(`builds need the engine's default runtime to be ${SANDBOX_RUNTIME} (it is ${stepRuntime}): set "default-runtime": "${SANDBOX_RUNTIME}" in the engine's daemon.json`);
    }
    return `==> RUN steps run under gVisor (${SANDBOX_RUNTIME})`;
  }

  /**
   * Pulls every image the build names, by its full name, before the build (a local copy proves
   * nothing, as for services), and refuses base images with ONBUILD triggers: the builder would
   * run them unchecked, and a remote ADD among them is fetched by the engine from the host's
   * network. Resolves to the ID of each checked copy, which the build is then pinned to
   * (pinImages): no second pull that could differ, and no tag moved meanwhile by another pull of
   * the same name. An image pulled ahead for this build (BaseImagePrefetch) is not pulled twice,
   * and one the tenant pulled a moment ago is not pulled again (RecentPulls).
   */
  private async pullBaseImages(tenantId: string, images: string[], signal: AbortSignal, output: LogBatcher, prefetched: PrefetchedPulls): Promise<Map<string, string>> {
    const ids = new Map<string, string>();
    for (const image of images) {
      const local = isLocallyBuilt(image);
      const name = local ? image : canonicalImageReference(image);
      // The tenant's own pull of that name a moment ago (recent-pulls.ts), while the engine still
      // holds the copy it left under that name; unless a pull was begun for this build (the
      // window was about to end when it was asked for): that one is newer.
      const recent = local || prefetched.has(image) ? null : this.deps.recentPulls.recent(tenantId, name);
      const kept = recent ? await this.deps.runtime.baseImage(name).catch(() => null) : null;
      const reused = recent !== null && kept?.id === recent.id;
      if (recent && !reused) this.deps.recentPulls.forget(tenantId, name);
      let base: { id: string; triggers: string[] };
      let pulledAt: number | null = null;
      if (kept && reused) {
        base = kept;
        output.line(`==> ${image} was pulled for this tenant ${Math.floor(recent.ageMs / 1000)} s ago: not pulled again (within --base-image-reuse, ${this.deps.recentPulls.reuseSeconds} s)`);
      } else {
        if (!local) output.line(`==> pulling ${image}`);
        const ahead = await prefetched.get(image);
        // The ID and the triggers of one read: the copy checked is the copy built from.
        base = await this.deps.runtime.baseImage(ahead?.name ?? (await pullTenantImage(this.deps.runtime, image, signal)));
        pulledAt = this.deps.clock.now();
        if (ahead && base.id === ahead.id) pulledAt = ahead.at;
        else if (ahead) {
          // Pulled ahead during the clone, and the name moved since to a copy that pull did not
          // leave (another pull, a tag by hand): what the registry serves the tenant, now.
          base = await this.deps.runtime.baseImage(await pullTenantImage(this.deps.runtime, image, signal));
          pulledAt = this.deps.clock.now();
        }
      }
      if (base.triggers.length > 0) {
        throw new Error(`base image ${image} has ONBUILD triggers, which builds do not run (they would escape the Dockerfile check)`);
      }
      // Recorded once checked, and only for a pull made for this build: a reuse does not stretch the window.
      if (!local && pulledAt !== null) this.deps.recentPulls.pulled(tenantId, name, base.id, pulledAt);
      ids.set(image, base.id);
    }
    return ids;
  }

  private async run(b: BuildRow, startedMs: number, signal: AbortSignal, dir: string): Promise<void> {
    const output = new LogBatcher(this.deps.store, b.id, this.deps.timers);
    const watch = this.deps.timers.setInterval(() => void this.stillWanted(b, signal), WATCH_MS);
    // Asked while git clones and the base images are pulled (the engine's answer is kept between
    // builds, kept-answer.ts; when it is asked, it takes 35-70 ms: longer than an uploaded
    // archive's unpacking), and awaited before anything is built (a pull runs nothing). Until
    // then a refusal is held here, not left unhandled.
    const sandboxCheck = this.checkBuildSandbox();
    sandboxCheck.catch(() => {});
    // While git clones (or the upload unpacks): the images its Dockerfile most likely names.
    const prefetched = this.deps.prefetch.forBuild(b.tenant_id, b.service_id, signal);
    try {
      await this.fetchSource(b, dir, signal, output);
      // Before the engine sees it: remote ADD and images the tenant may not use (dockerfile.ts).
      const dockerfile = readDockerfile(dir);
      const images = checkDockerfile(dockerfile, { tenantId: b.tenant_id, buildRegistry: this.deps.buildRegistry ?? null });
      await this.deps.store.builds.updateRunning(b.id, this.deps.holder, { base_images: JSON.stringify(images) });
      const ids = await this.pullBaseImages(b.tenant_id, images, signal, output, await prefetched);
      pinDockerfile(dir, dockerfile, ids);
      for (const [image, id] of ids) output.line(`==> ${image} is ${id}`);
      const sandboxed = await sandboxCheck;
      if (sandboxed !== null) output.line(sandboxed);

      const tenant = await this.deps.store.tenants.findById(b.tenant_id);
      if (!tenant) throw new Error('tenant not found');
      // Asked again right before the engine builds, and once it has built: the first answer may
      // be from before a long clone, and a reload while the engine builds would give the later
      // RUN steps another runtime. Free unless the engine reported a change (kept-answer.ts).
      await this.checkBuildSandbox();
      output.line(`==> building ${b.image}`);
      await this.deps.runtime.buildImage({
        contextDir: dir,
        tag: b.image,
        tenantId: b.tenant_id,
        resourceId: b.id,
        limits: workloadLimits(tenant),
        // Pulled and checked just above (pullBaseImages).
        pullBaseImages: false,
        signal,
        onOutput: (l) => output.line(l),
      });
      if (signal.aborted) throw signal.reason;
      await this.checkBuildSandbox();
      if (this.deps.pushBuilds) {
        output.line(`==> pushing ${b.image}`);
        await this.deps.runtime.pushImage(b.image, signal, (l) => output.line(l));
      }
      output.line('==> built; deploying');
      // Written while the deployment is requested (one after the other, 1-2 ms of every build's
      // way to its container), and in before the build reads finished: a client that follows the
      // log until the end has every line.
      const logged = output.flush();
      const dep = await this.deps.services.deployBuild(b.tenant_id, b.service_id, b.image, b.id);
      await logged;
      await this.finish(b, 'succeeded', null, dep.id, startedMs);
      await this.removeOldImages(b).catch((err: unknown) => this.deps.log.warn({ err, build: b.id }, 'could not remove old build images'));
    } catch (err) {
      const message = signal.aborted && signal.reason instanceof Error ? signal.reason.message : (err as Error).message;
      output.line(`==> build failed: ${message}`);
      await output.flush();
      // A cancel has already written the record; anything else fails it.
      await this.finish(b, 'failed', message, null, startedMs);
    } finally {
      watch.cancel();
      await output.close();
    }
  }

  /**
   * Puts the build's source in `dir`: the git clone at its ref, or the uploaded archive unpacked
   * (checked again as it is written: only this pass writes, and only what it has judged).
   */
  private async fetchSource(b: BuildRow, dir: string, signal: AbortSignal, output: LogBatcher): Promise<void> {
    if (b.source_type === 'archive') {
      if (b.source_id === null) throw new Error('the build names no uploaded archive');
      output.line(`==> unpacking the uploaded ${b.source_url}`);
      const summary = await readArchive(storedArchive(this.deps.store, b.source_id), ARCHIVE_LIMITS, dir, signal);
      output.line(`==> ${summary.files} files, ${(summary.unpackedBytes / 1024 ** 2).toFixed(1)} MB`);
      return;
    }
    // Checked again now, not trusted from when the build was queued: the clone connects to the
    // addresses this check found and judged, pinned, whatever DNS answers next.
    const source = await this.deps.checkSource(b.source_url);
    output.line(`==> cloning ${source.url}${b.source_ref ? ` at ${b.source_ref}` : ''}`);
    const sha = await cloneAt({
      source,
      ref: b.source_ref,
      dir,
      maxBytes: this.deps.cloneMaxBytes ?? CLONE_MAX_BYTES,
      signal,
      timers: this.deps.timers,
      caBundle: this.deps.gitCaBundle,
      onOutput: (l) => output.line(l),
    });
    await this.deps.store.builds.updateRunning(b.id, this.deps.holder, { commit_sha: sha });
    output.line(`==> commit ${sha}`);
  }

  /**
   * A service keeps the images of its newest few successful builds (and any image it runs or a
   * snapshot names); older ones are removed. They count against the tenant's disk quota, and the
   * tenant has no other way to delete them. With --build-registry they stay in the registry.
   */
  private async removeOldImages(b: BuildRow): Promise<void> {
    const succeeded = (await this.deps.store.builds.listForService(b.tenant_id, b.service_id, BUILDS_SCANNED_FOR_IMAGES, 0)).filter((x) => x.status === 'succeeded');
    if (succeeded.length <= BUILT_IMAGES_KEPT) return;
    const service = await this.deps.store.services.find(b.tenant_id, b.service_id);
    const snapshots = await this.deps.store.snapshots.list(b.tenant_id, SNAPSHOTS_SCANNED, 0);
    const named = new Set([service?.image, ...snapshots.map((s) => s.image)]);
    for (const old of succeeded.slice(BUILT_IMAGES_KEPT)) if (!named.has(old.image)) await this.deps.runtime.removeImage(old.image);
  }

  /** Aborts the build when its record says it should stop: cancelled or gone (its service was deleted). */
  private async stillWanted(b: BuildRow, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return;
    const now = await this.deps.store.builds.findAny(b.id).catch(() => 'unknown' as const);
    if (now === 'unknown') return;
    if (!now) return void this.abort(b.id, 'the service was deleted');
    if (now.status !== 'running' || now.holder !== this.deps.holder) return void this.abort(b.id, now.last_error ?? `build ${now.status}`);
    // Still ours: keep the lease alive.
    await this.deps.store.builds.updateRunning(b.id, this.deps.holder, { lease_until_ms: this.deps.clock.now() + this.leaseMs }).catch(() => {});
  }

  private async finish(b: BuildRow, status: 'succeeded' | 'failed', error: string | null, deploymentId: string | null, startedMs?: number): Promise<void> {
    const nowMs = this.deps.clock.now();
    await this.deps.store.transaction(async (tx) => {
      const moved = await tx.builds.transition(b.id, ['running'], {
        status,
        last_error: error,
        deployment_id: deploymentId,
        finished_at: unixSeconds(this.deps.clock),
        duration_ms: startedMs === undefined ? durationSince(b, nowMs) : nowMs - startedMs,
      });
      if (!moved) return;
      await this.deps.activity.record(tx, {
        tenantId: b.tenant_id,
        action: `build.${status}`,
        resourceType: 'build',
        resourceId: b.id,
        serviceId: b.service_id,
        details: error ? { error } : { image: b.image, deployment_id: deploymentId },
      });
    });
    // Whether or not this moved it (a cancel may have ended it first), the record is final now.
    this.buildEnds.wake(b.id);
    this.deps.log.info({ build: b.id, status, error }, 'build finished');
  }
}

/**
 * Collects output lines and writes them to the store in batches (one row per batch), so that a
 * chatty build does not cost a transaction per line; a followed log sees them within 200 ms.
 */
class LogBatcher {
  private pending = '';
  private writing: Promise<void> = Promise.resolve();
  private timer: TimerHandle | null = null;

  constructor(
    private readonly store: Store,
    private readonly buildId: string,
    private readonly timers: Timers,
  ) {}

  line(text: string): void {
    this.pending += `${text}\n`;
    if (this.pending.length >= LOG_FLUSH_BYTES) void this.flush();
    else this.timer ??= this.timers.setTimeout(() => void this.flush(), LOG_FLUSH_MS);
  }

  flush(): Promise<void> {
    this.timer?.cancel();
    this.timer = null;
    const chunk = this.pending;
    this.pending = '';
    if (chunk) {
      this.writing = this.writing
        .then(() => this.store.builds.appendLog(this.buildId, chunk, BUILD_LOG_MAX_BYTES))
        .catch(() => {}); // the build itself matters more than its log; a lost batch is not fatal
    }
    return this.writing;
  }

  close(): Promise<void> {
    return this.flush();
  }
}
