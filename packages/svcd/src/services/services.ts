// Service rules: creation (name, image, port, env, quota, DNS label), lifecycle through
// deployments, env, logs. Every read and change is scoped to the calling tenant; a foreign
// service is the same 404 as a missing one. Lifecycle requests write the service's workload row
// (its desired state, one generation on) with the record in one transaction; the workload
// controller carries them out on whichever svcd claims the row (deployer.ts).
import type { CreateServiceRequest, Deployment, LifecycleResponse, Service } from '@svc/contract';
import { DEFAULT_SERVICE_PORT, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import type { HeldWaits } from '../sessions/held-waits.js';
import { holdWhileOpen, type SessionLimits } from '../sessions/session-limits.js';
import type { DiskOverrunHalt, DiskQuota } from '../disk/disk-quota.js';
import { ConflictError, NotFoundError, QuotaExceededError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import { WorkloadNotRunningError } from '../runtime/index.js';
import { isUniqueViolation, type DeploymentRow, type ServiceRow } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import type { WorkloadController } from '../workloads/controller.js';
import { deploymentRow, requestCancel, requestDeployment, requestStop, serviceWorkloadSpec, type Deployer } from './deployer.js';
import { claimHostName, dnsLabelFor } from './dns-labels.js';
import { healthCheckOf, storedHealthCheck } from './health-checks.js';
import { AWAITS_BUILD, builtImageRepository, NO_IMAGE, tenantImageRefusal } from './images.js';
import { serviceUrl, type RoutingOptions } from './routing.js';
import type { Snapshots } from './snapshots.js';
import type { Platform } from '../platform.js';

const MASK = '********';
/**
 * How long a stop, a cancel or a delete waits for the controller to have removed the container
 * (a clean stop takes up to 10 s): the request answers within the API's 30 s either way, and
 * the controller finishes the removal later.
 */
const SETTLE_TIMEOUT_MS = 20_000;

export function deploymentView(d: DeploymentRow): Deployment {
  return {
    id: d.id,
    service_id: d.service_id,
    status: d.status,
    reason: d.reason,
    image: d.image,
    build_id: d.build_id,
    last_error: d.last_error,
    created_at: d.created_at,
    started_at: d.started_at,
    finished_at: d.finished_at,
  };
}

export interface ServicesOptions extends RoutingOptions {
  /** Called after a change of what the proxy should route. */
  routesChanged?: () => void;
  /** Where builds are pushed (--build-registry), for removing them with their service. */
  buildRegistry?: string | null;
  /** A log read holds one of the tenant's log-stream slots while it is open. */
  sessions: Pick<SessionLimits, 'acquire'>;
  /** New services are refused while the tenant is at its disk quota. */
  disk: Pick<DiskQuota, 'assertRoom'>;
  /** ?wait requests held open: capped per tenant and in all, ended when the server closes. */
  waits: Pick<HeldWaits, 'readOnceSettled'>;
}

/** What a Services is built from, by name. */
export interface ServicesDeps extends ServicesOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'audit'> {
  controller: Pick<WorkloadController, 'kick' | 'settled' | 'nextChange'>;
  snapshots: Snapshots;
  /** On a swarm: whether a port is left for a new service. */
  ports: Pick<Deployer, 'assertPortLeft'>;
}

/** A tenant's services and their replicas together take at most max_services shares of its memory and CPU quota. */
function assertShares(maxServices: number, shares: number): void {
  if (shares > maxServices) {
    throw new QuotaExceededError(`the replicas of the tenant's services would take ${shares} service shares of its memory and CPU quota; it has ${maxServices} (max_services)`);
  }
}

export class Services implements TenantResources, DiskOverrunHalt {
  constructor(private readonly deps: ServicesDeps) {}

  view(s: ServiceRow): Service {
    return {
      id: s.id,
      name: s.name,
      image: s.image,
      port: s.port,
      status: s.status,
      url: serviceUrl(s, this.deps),
      dns_label: s.dns_label,
      health_check: healthCheckOf(s.health_check),
      replicas: s.replicas,
      last_error: s.last_error,
      crash_count: s.crash_count,
      circuit_open: s.circuit_open_at !== null,
      last_crash_at: s.last_crash_at,
      created_at: s.created_at,
      updated_at: s.updated_at,
    };
  }

  /** A service from a snapshot: the snapshot gives image, port and env; the body only the name. */
  async createFromSnapshot(tenantId: string, snapshotId: string, req: CreateServiceRequest): Promise<Service> {
    if (req.image !== undefined || req.port !== undefined || req.env !== undefined || req.health_check !== undefined || req.await_build !== undefined) {
      throw new ValidationError('with from_snapshot, the body takes only name and replicas: image, port, env and health_check come from the snapshot (and await_build has no place there)');
    }
    const c = await this.deps.snapshots.contents(tenantId, snapshotId);
    return this.create(tenantId, { name: req.name, image: c.image, port: c.port, env: c.env, health_check: c.healthCheck, ...(req.replicas === undefined ? {} : { replicas: req.replicas }) });
  }

  async create(tenantId: string, req: CreateServiceRequest): Promise<Service> {
    // Without an image (await_build), the service waits stopped for its first build to deploy it.
    const awaitsBuild = req.await_build === true;
    if (awaitsBuild && req.image !== undefined) throw new ValidationError('await_build creates a service without an image: leave image out (its first build deploys it)');
    const image = awaitsBuild ? NO_IMAGE : req.image;
    if (image === undefined) throw new ValidationError('body: image is required');
    if (!awaitsBuild) {
      const refusal = tenantImageRefusal(image, { tenantId, buildRegistry: this.deps.buildRegistry ?? null });
      if (refusal) throw new ValidationError(refusal);
    }
    const name = req.name.trim();
    if (name === '') throw new ValidationError('body: name must not be blank');
    const port = req.port === undefined || req.port === 0 ? DEFAULT_SERVICE_PORT : req.port;
    const healthCheck = storedHealthCheck(req.health_check);
    const replicas = req.replicas ?? 1;
    await this.assertReplicasOffered(replicas);
    await this.deps.disk.assertRoom(tenantId);
    await this.deps.ports.assertPortLeft();
    const env = req.env ?? {};
    const id = hexId(12);
    const now = unixSeconds(this.deps.clock);
    try {
      await this.deps.store.transaction(async (tx) => {
        // Held to commit: concurrent creates of this tenant count one after another.
        await tx.tenants.lockForQuota(tenantId);
        const tenant = await tx.tenants.findById(tenantId);
        if (!tenant) throw new NotFoundError('tenant');
        if ((await tx.services.count(tenantId)) >= tenant.max_services) {
          throw new QuotaExceededError(`maximum services reached (${tenant.max_services})`);
        }
        assertShares(tenant.max_services, (await tx.services.shares(tenantId)) + replicas);
        if (Object.keys(env).length > tenant.max_env_vars_per_service) {
          throw new QuotaExceededError(`maximum environment variables per service is ${tenant.max_env_vars_per_service}`);
        }
        const dnsLabel = dnsLabelFor(name);
        await tx.services.insert({
          id,
          tenant_id: tenantId,
          name,
          name_key: name.toLowerCase(),
          image,
          port,
          status: awaitsBuild ? 'stopped' : 'deploying',
          desired_state: awaitsBuild ? 'stopped' : 'running',
          dns_label: dnsLabel,
          last_error: null,
          container_id: null,
          crash_count: 0,
          crash_window_start: null,
          last_crash_at: null,
          circuit_open_at: null,
          health_check: healthCheck,
          replicas,
          created_at: now,
          updated_at: now,
        });
        // After the insert, so that a name the tenant already uses is reported as such.
        // Only a base domain makes the label a host (<label>.<base>); without one a 409 would
        // only tell this tenant that another has a service of that name.
        if (this.deps.baseDomain !== null) {
          await claimHostName(tx, { hostname: dnsLabel, tenantId, kind: 'service', resourceId: id, now }, `the DNS label ${JSON.stringify(dnsLabel)} is taken; choose another name`);
        }
        for (const [k, v] of Object.entries(env)) await tx.serviceEnv.set(id, k, this.deps.sealer.seal(v), now);
        await this.deps.activity.record(tx, { tenantId, action: 'service.created', resourceType: 'service', resourceId: id, serviceId: id, details: awaitsBuild ? { name, await_build: true } : { name, image } });
        // Its workload, generation 1, and the deployment that carries it out; a service that
        // awaits its build has a workload that is to stay stopped, settled from the start (the
        // engine has nothing of it to stop), and no deployment yet.
        const spec = serviceWorkloadSpec(id);
        const workload = { id: spec.name, tenant_id: tenantId, kind: 'service' as const, resource_id: id, spec: JSON.stringify(spec) };
        if (awaitsBuild) {
          await tx.workloads.insertNeverRun(workload, now);
        } else {
          await tx.workloads.insertPending(workload, now);
          await tx.deployments.insert(deploymentRow(this.deps.clock, { tenantId, serviceId: id, image, reason: 'create', generation: 1 }));
        }
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`a service named ${JSON.stringify(name)} already exists`);
      throw err;
    }
    if (!awaitsBuild) this.deps.controller.kick();
    this.deps.routesChanged?.();
    return this.view(await this.row(tenantId, id));
  }

  async list(tenantId: string, limit?: number, offset?: number): Promise<Service[]> {
    const rows = await this.deps.store.services.list(tenantId, Math.min(limit ?? PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX), offset ?? 0);
    return rows.map((r) => this.view(r));
  }

  async get(tenantId: string, id: string): Promise<Service> {
    return this.view(await this.row(tenantId, id));
  }

  /**
   * The service once it is no longer deploying, or as it is after `waitMs` (?wait=N): a client
   * following a deploy is answered when it ends, not at its next poll. Read again as soon as this
   * svcd's controller ends its work on the service (HeldWaits).
   */
  getOnceDeployed(tenantId: string, id: string, waitMs: number, gone: AbortSignal): Promise<Service> {
    return this.deps.waits.readOnceSettled(tenantId, gone, waitMs, {
      read: async () => this.view(await this.row(tenantId, id)),
      settled: (s) => s.status !== 'deploying',
      nextChange: (pauseMs, ended) => this.deps.controller.nextChange(pauseMs, 'service', id, ended),
    });
  }

  async rename(tenantId: string, id: string, newName: string): Promise<Service> {
    const name = newName.trim();
    if (name === '') throw new ValidationError('body: name must not be blank');
    try {
      await this.deps.store.transaction(async (tx) => {
        const s = await tx.services.find(tenantId, id);
        if (!s) throw new NotFoundError('service');
        // The DNS label stays (and so does its reservation): renaming must not move the
        // service's public address.
        await tx.services.update(id, { name, name_key: name.toLowerCase(), updated_at: unixSeconds(this.deps.clock) });
        await this.deps.activity.record(tx, { tenantId, action: 'service.renamed', resourceType: 'service', resourceId: id, serviceId: id, details: { from: s.name, to: name } });
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(`a service named ${JSON.stringify(name)} already exists`);
      throw err;
    }
    return this.get(tenantId, id);
  }

  /**
   * Sets how many copies of the service run (beyond the spec). A service that is to run is
   * deployed again with the new count (rolling where the cluster has room beside what runs); a
   * stopped one, or one whose circuit is open, keeps the count for its next deployment.
   */
  async scale(tenantId: string, id: string, replicas: number): Promise<LifecycleResponse> {
    await this.assertReplicasOffered(replicas);
    const now = unixSeconds(this.deps.clock);
    const dep = await this.deps.store.transaction(async (tx) => {
      // Held to commit, as at create: concurrent scales and creates of this tenant count one after another.
      await tx.tenants.lockForQuota(tenantId);
      const tenant = await tx.tenants.findById(tenantId);
      // The workload's generation read before the service: a deploy requested meanwhile (a
      // build's, with a new image) moves it on, and this scale then asks to be tried again
      // rather than deploy the image it read.
      const generation = (await tx.workloads.find('service', id))?.generation;
      const s = await tx.services.find(tenantId, id);
      if (!tenant || !s || generation === undefined) throw new NotFoundError('service');
      if (s.replicas === replicas) return null;
      assertShares(tenant.max_services, (await tx.services.shares(tenantId)) - s.replicas + replicas);
      const deploys = s.desired_state === 'running' && s.image !== NO_IMAGE && s.circuit_open_at === null;
      const requested = deploys ? await requestDeployment(tx, this.deps, { tenantId, serviceId: id, image: s.image, reason: 'scale', ifGeneration: generation }) : null;
      if (deploys && !requested) throw new ConflictError('the service changed while it was scaled (another deployment was requested): scale it again');
      await tx.services.update(id, { replicas, ...(requested ? { status: 'deploying' as const, last_error: null } : {}), updated_at: now });
      await this.deps.activity.record(tx, { tenantId, action: 'service.scaled', resourceType: 'service', resourceId: id, serviceId: id, details: { from: s.replicas, to: replicas } });
      return requested;
    });
    if (dep) {
      this.deps.controller.kick();
      this.deps.routesChanged?.();
    }
    return { service: await this.get(tenantId, id), deployment: dep ? deploymentView(dep) : null };
  }

  /** More than one replica only where the driver runs them (a cluster: a replica per node). */
  private async assertReplicasOffered(replicas: number): Promise<void> {
    if (replicas > 1 && !(await this.deps.runtime.capabilities()).replicas) {
      throw new ValidationError('body: replicas above 1 need a cluster (svcd --runtime swarm); this installation runs one engine');
    }
  }

  /** Deletes the record now; the controller removes the container (and the tenant's network when it was its last). */
  async delete(tenantId: string, id: string): Promise<void> {
    const s = await this.row(tenantId, id);
    await this.deps.store.transaction(async (tx) => {
      await requestStop(tx, this.deps, id, 'absent', 'the service was deleted');
      await tx.snapshots.detachService(id);
      if (!(await tx.services.delete(tenantId, id, unixSeconds(this.deps.clock)))) throw new NotFoundError('service');
      await this.deps.activity.record(tx, { tenantId, action: 'service.deleted', resourceType: 'service', resourceId: id, serviceId: id, details: { name: s.name } });
    });
    this.deps.routesChanged?.();
    await this.settled(id);
    await this.deps.runtime.removeRepository(builtImageRepository(this.deps.buildRegistry ?? null, tenantId, id));
  }

  /** start, restart, redeploy and reset: a new deployment (restart recreates, so env changes apply). */
  async deploy(tenantId: string, id: string, reason: 'start' | 'restart' | 'redeploy' | 'reset'): Promise<LifecycleResponse> {
    const s = await this.row(tenantId, id);
    if (s.image === NO_IMAGE) throw new ConflictError(AWAITS_BUILD);
    if (reason === 'start' && s.status === 'running') throw new ConflictError('service is already running');
    if (reason !== 'reset' && s.circuit_open_at !== null) {
      throw new ConflictError('the crash circuit is open: reset the service to deploy it again');
    }
    const verb = { start: 'started', restart: 'restarted', redeploy: 'redeployed', reset: 'reset' }[reason];
    const dep = await this.startDeployment(tenantId, id, {
      image: s.image,
      reason,
      clearCrashes: reason === 'reset',
      action: `service.${verb}`,
    });
    return { service: await this.get(tenantId, id), deployment: deploymentView(dep) };
  }

  /**
   * Deploys the image a build produced (builds issue): the service takes the image, and its crash
   * state is cleared, since new code is the usual answer to a crash loop. Returns the deployment.
   */
  async deployBuild(tenantId: string, id: string, image: string, buildId: string): Promise<Deployment> {
    await this.row(tenantId, id);
    const dep = await this.startDeployment(tenantId, id, {
      image,
      reason: 'build',
      clearCrashes: true,
      takesImage: true,
      action: 'service.redeployed',
      details: { build_id: buildId, image },
      buildId,
    });
    return deploymentView(dep);
  }

  /**
   * A new deployment of an existing service: what is unfinished is superseded, the service turns
   * `deploying`, the change is recorded, and the deploy starts.
   */
  private async startDeployment(
    tenantId: string,
    id: string,
    d: {
      image: string;
      reason: string;
      clearCrashes: boolean;
      /** The service's own image becomes the deployment's (a build); otherwise it is left as it is. */
      takesImage?: boolean;
      action: string;
      details?: Record<string, unknown>;
      buildId?: string;
    },
  ): Promise<DeploymentRow> {
    const now = unixSeconds(this.deps.clock);
    const dep = await this.deps.store.transaction(async (tx) => {
      const requested = await requestDeployment(tx, this.deps, { tenantId, serviceId: id, image: d.image, reason: d.reason, buildId: d.buildId ?? null });
      if (!requested) throw new NotFoundError('service');
      const crash = d.clearCrashes ? { crash_count: 0, crash_window_start: null, last_crash_at: null, circuit_open_at: null } : {};
      await tx.services.update(id, { ...crash, ...(d.takesImage ? { image: d.image } : {}), status: 'deploying', desired_state: 'running', last_error: null, updated_at: now });
      await this.deps.activity.record(tx, { tenantId, action: d.action, resourceType: 'service', resourceId: id, serviceId: id, details: d.details });
      return requested;
    });
    this.deps.controller.kick();
    this.deps.routesChanged?.();
    return dep;
  }

  async stop(tenantId: string, id: string): Promise<LifecycleResponse> {
    const s = await this.row(tenantId, id);
    await this.stopService(s);
    await this.settled(id);
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'service.stopped', resourceType: 'service', resourceId: id, serviceId: id });
    return { service: await this.get(tenantId, id), deployment: null };
  }

  async deployments(tenantId: string, id: string, limit?: number, offset?: number): Promise<Deployment[]> {
    await this.row(tenantId, id);
    const rows = await this.deps.store.deployments.listForService(id, Math.min(limit ?? PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX), offset ?? 0);
    return rows.map(deploymentView);
  }

  /**
   * Cancels the service's unfinished deployment: its workload is to stop (the controller aborts
   * the apply wherever it runs and removes what it started), and the service reads failed. Waits
   * until the container is gone.
   */
  async cancelDeployment(tenantId: string, id: string, deploymentId: string): Promise<Deployment> {
    await this.row(tenantId, id);
    await this.deps.store.transaction((tx) => requestCancel(tx, this.deps, id, deploymentId));
    this.deps.routesChanged?.();
    await this.settled(id);
    const after = await this.deps.store.deployments.find(deploymentId);
    if (!after) throw new NotFoundError('deployment');
    return deploymentView(after);
  }

  async logs(tenantId: string, id: string, tail: number, follow: boolean): Promise<NodeJS.ReadableStream | null> {
    const s = await this.row(tenantId, id);
    if (!s.container_id) return null;
    if (!(await this.deps.runtime.inspect(s.container_id))) return null;
    const slot = await this.deps.sessions.acquire(tenantId, 'logs');
    try {
      return holdWhileOpen(slot, await this.deps.runtime.logs(s.container_id, { tail, follow }));
    } catch (err) {
      await slot.release();
      // Removed between the look and the read (a redeploy or a halt replacing it): as if gone.
      if (err instanceof WorkloadNotRunningError) return null;
      throw err;
    }
  }

  async env(tenantId: string, id: string, reveal: boolean): Promise<Record<string, string>> {
    await this.row(tenantId, id);
    const sealed = await this.deps.store.serviceEnv.get(id);
    if (reveal) this.deps.audit.info({ audit: true, event: 'service.env.reveal', tenant_id: tenantId, service_id: id }, 'service env revealed');
    return Object.fromEntries([...sealed].map(([k, v]) => [k, reveal ? this.deps.sealer.open(v) : MASK]));
  }

  /** Merges variables; they apply on the next restart. */
  async setEnv(tenantId: string, id: string, vars: Record<string, string>): Promise<Record<string, string>> {
    const now = unixSeconds(this.deps.clock);
    await this.deps.store.transaction(async (tx) => {
      // Held to commit: two merges at once must not both fit under the limit and together exceed it.
      await tx.tenants.lockForQuota(tenantId);
      const s = await tx.services.find(tenantId, id);
      if (!s) throw new NotFoundError('service');
      const tenant = await tx.tenants.findById(tenantId);
      const existing = await tx.serviceEnv.get(id);
      const total = new Set([...existing.keys(), ...Object.keys(vars)]).size;
      if (tenant && total > tenant.max_env_vars_per_service) {
        throw new QuotaExceededError(`maximum environment variables per service is ${tenant.max_env_vars_per_service}`);
      }
      for (const [k, v] of Object.entries(vars)) await tx.serviceEnv.set(id, k, this.deps.sealer.seal(v), now);
      await this.deps.activity.record(tx, { tenantId, action: 'service.env_updated', resourceType: 'service', resourceId: id, serviceId: id, details: { keys: Object.keys(vars) } });
    });
    return this.env(tenantId, id, false);
  }

  async unsetEnv(tenantId: string, id: string, key: string): Promise<void> {
    await this.deps.store.transaction(async (tx) => {
      if (!(await tx.services.find(tenantId, id))) throw new NotFoundError('service');
      if (!(await tx.serviceEnv.delete(id, key))) throw new NotFoundError('environment variable');
      await this.deps.activity.record(tx, { tenantId, action: 'service.env_deleted', resourceType: 'service', resourceId: id, serviceId: id, details: { key } });
    });
  }

  // TenantResources: usage counts and suspension.
  /** The service shares taken, which max_services bounds: one per service, or per replica of one (the same without replicas). */
  async count(tenantId: string): Promise<{ services: number }> {
    return { services: await this.deps.store.services.shares(tenantId) };
  }

  /** Suspension stops every service; reactivation leaves them stopped until started. Waits until they are down. */
  async suspend(tenantId: string): Promise<void> {
    const services = await this.deps.store.services.list(tenantId, Number.MAX_SAFE_INTEGER, 0);
    for (const s of services) await this.stopService(s);
    await Promise.all(services.map((s) => this.settled(s.id)));
  }

  async haltForDisk(tenantId: string, reason: string): Promise<number> {
    const halted: ServiceRow[] = [];
    for (const s of await this.deps.store.services.list(tenantId, Number.MAX_SAFE_INTEGER, 0)) {
      if (s.desired_state === 'stopped') continue;
      await this.stopService(s, reason);
      await this.deps.activity.record(this.deps.store, { tenantId, action: 'service.stopped', resourceType: 'service', resourceId: s.id, serviceId: s.id, details: { reason } });
      halted.push(s);
    }
    await Promise.all(halted.map((s) => this.settled(s.id)));
    return halted.length;
  }

  /** Requests the service stopped; `why`, when given, is its last_error from the moment it reads stopped. */
  private async stopService(s: ServiceRow, why?: string): Promise<void> {
    // Asked and carried out already: nothing for the controller to do again.
    const w = await this.deps.store.workloads.find('service', s.id);
    if (s.status === 'stopped' && w?.desired_state === 'stopped' && w.observed_generation === w.generation) return;
    await this.deps.store.transaction(async (tx) => {
      await requestStop(tx, this.deps, s.id, 'stopped', 'superseded by a newer request');
      await tx.services.update(s.id, { status: 'stopped', desired_state: 'stopped', upstream: null, ...(why === undefined ? {} : { last_error: why }), updated_at: unixSeconds(this.deps.clock) });
    });
    this.deps.controller.kick();
    this.deps.routesChanged?.();
  }

  /** Waits until the controller (of any svcd) carried out the service's latest request, or the wait ends. */
  private async settled(serviceId: string): Promise<void> {
    await this.deps.controller.settled('service', serviceId, SETTLE_TIMEOUT_MS);
  }

  private async row(tenantId: string, id: string): Promise<ServiceRow> {
    const s = await this.deps.store.services.find(tenantId, id);
    if (!s) throw new NotFoundError('service');
    return s;
  }
}
