// The `environment` kind's rules for the workload controller (workloads/controller.ts). Requests
// (create, start, stop, lease expiry, the disk limit, suspension, delete) write the environment's
// record and its workload's desired state in one transaction (environments.ts); the controller of
// whichever svcd claims the row brings the container there, and its outcome lands here. Stopped,
// an environment keeps its container (what its commands installed outside the workspace is still
// there when it starts again); it is removed, with its workspace volume, only when deleted.
import { unixSeconds } from '../clock.js';
import type { Activity } from '../activity/activity.js';
import { AGENT_TOKEN_ENV, type Applied, type DriverCapabilities, type Endpoint } from '../runtime/index.js';
import type { EnvironmentRow, Repositories, WorkloadRow } from '../store/index.js';
import { parseSpecRecord, type WorkloadController, type WorkloadOutcome, type WorkloadRules, type WorkloadSpecRecord } from '../workloads/controller.js';
import { ENVIRONMENT_RESOURCES } from './templates.js';
import { AGENT_PORT, agentAddress, agentAnswers, type AgentAddress } from './agent.js';
import { publishedPortFor } from '../provisioning/published-ports.js';
import type { Platform } from '../platform.js';

export const WORKSPACE = '/workspace';
const STOP_TIMEOUT_S = 5;
/** A started environment container runs with an address at once; past this, something is wrong with the engine. */
const ENVIRONMENT_READY_TIMEOUT_MS = 60_000;
const ENVIRONMENT_READY_POLL_MS = 25;
/** One health check of the agent: on a local bridge it answers in a millisecond or not at all. */
const AGENT_PROBE_TIMEOUT_MS = 1_000;

/** A record's last_error while the engine is away: svc starts it when the engine answers. */
const ENGINE_AWAY = 'container engine unavailable; svc starts the environment when the engine answers';

/** The engine name of an environment's own container (and of its workspace volume). */
export function environmentWorkloadName(id: string): string {
  return `svc-env-${id}`;
}

/** The workload spec of an environment whose container and workspace volume are named `name`. */
export function environmentSpec(name: string): WorkloadSpecRecord {
  return { name, volumes: [name], stopTimeoutS: STOP_TIMEOUT_S, keepStopped: true };
}

/** Where an environment runs on a swarm (clusterPlacement). */
interface ClusterPlacement {
  port: number;
  node: string | null;
  holdsData: boolean;
}

export interface EnvironmentWorkloadsDeps extends Pick<Platform, 'store' | 'runtime' | 'clock' | 'sealer'> {
  /** The driver's capabilities (asked of it once: environments.ts). */
  capabilities(): Promise<DriverCapabilities>;
  /** --swarm-ports: on a swarm, an environment's agent is published on one of them. */
  publishedPorts: { from: number; to: number };
  controller: WorkloadController;
  activity: Activity;
  sandbox: () => Promise<boolean>;
  /** An environment's address changed (it started, stopped or went): previews route anew. */
  routesChanged: () => void;
}

export class EnvironmentWorkloads implements WorkloadRules {
  constructor(private readonly deps: EnvironmentWorkloadsDeps) {
    deps.controller.handle('environment', this);
  }

  /**
   * Its container started again when it is the one observed last (stopped by a request, or by
   * the engine going away: its file system is kept), else a new one on its workspace volume. A
   * container under its name that this row never observed (one a dead svcd's apply started, and
   * that apply may yet remove when it ends) is replaced, not adopted.
   */
  async apply(w: WorkloadRow, signal: AbortSignal): Promise<Applied> {
    const e = await this.deps.store.environments.findAny(w.resource_id);
    if (!e) throw new Error('the environment record is gone');
    // A suspension stops every environment of the tenant; one applied after it does not run.
    if ((await this.deps.store.tenants.findById(e.tenant_id))?.status !== 'active') throw new Error('the tenant is suspended');
    const name = parseSpecRecord(w).name;
    const agentToken = e.agent_token === null ? null : this.deps.sealer.open(e.agent_token);
    // On a swarm: its agent on a port of its own, published on the node its workspace is on.
    const onCluster = (await this.deps.capabilities()).allocatedPorts;
    // Never observed (a creation): nothing to start again, and apply replaces what runs under the name.
    const existing = w.driver_ref === null ? null : await this.deps.runtime.inspect(name);
    if (existing && existing.id === w.driver_ref) {
      if (existing.state === 'running') return { ref: existing.id, endpoint: { host: existing.address?.host ?? '', port: null } };
      // A swarm keeps no stopped container to start again (a task starts anew): applied anew,
      // which checks first that the workspace's node can run it.
      if (!onCluster) {
        const endpoint = await this.deps.runtime.start(existing.id);
        const host = endpoint?.host ?? '';
        // Started again: ready once its agent answers, as a new one is (its first command then
        // does not find it still starting and go through the engine).
        if (agentToken !== null && host) await this.agentUp(agentAddress(host, null, agentToken), signal);
        return { ref: existing.id, endpoint: { host, port: null } };
      }
    }
    return this.run({ name, image: e.image, tenantId: e.tenant_id, resourceId: e.id, agentToken, signal, ...(onCluster ? { cluster: await this.clusterPlacement(e) } : {}) });
  }

  /**
   * Where an environment runs on a swarm: the port its agent is published on (allocated at its
   * first run, for its life), and the node its workspace is on (chosen at its first run; a
   * workspace of before the swarm is on no node of it, and is not started empty elsewhere).
   */
  private async clusterPlacement(e: EnvironmentRow): Promise<ClusterPlacement> {
    const owner = { table: 'environments' as const, id: e.id, current: async () => (await this.deps.store.environments.findAny(e.id))?.published_port, what: 'the environment', retry: 'start it again' };
    const port = await publishedPortFor(this.deps.store, owner, this.deps.publishedPorts, () => unixSeconds(this.deps.clock));
    return { port, node: e.node, holdsData: e.node === null && e.container_id !== null };
  }

  /** Waits for the agent of a container started again (svc-init listens before anything else starts: a moment). */
  private async agentUp(at: AgentAddress, signal: AbortSignal): Promise<void> {
    // Real time: this paces a wait on a process starting, like the engine's own readiness wait.
    const until = Date.now() + ENVIRONMENT_READY_TIMEOUT_MS;
    for (;;) {
      if (signal.aborted) throw signal.reason;
      try {
        await agentAnswers(at, AGENT_PROBE_TIMEOUT_MS);
        return;
      } catch (err) {
        if (Date.now() >= until) throw new Error(`the environment's agent did not answer: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, ENVIRONMENT_READY_POLL_MS));
    }
  }

  async observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    const e = await tx.environments.findAny(w.resource_id);
    if (!e) return;
    const now = unixSeconds(this.deps.clock);
    switch (outcome.state) {
      case 'running':
        // Started for a tenant suspended while it started: a creation is undone, anything else
        // stopped again, as the suspension did to the rest.
        if ((await tx.tenants.findById(e.tenant_id))?.status !== 'active') {
          if (e.status === 'creating') {
            await tx.workloads.request('environment', e.id, 'absent', now);
            await tx.environments.delete(e.id, now, 'creating');
          } else {
            await tx.workloads.request('environment', e.id, 'stopped', now);
            await tx.environments.update(e.id, { status: e.status === 'expired' ? 'expired' : 'stopped', container_id: outcome.applied.ref, address: null, updated_at: now });
          }
          tx.afterCommit(() => this.deps.controller.kick());
          return;
        }
        await tx.environments.update(e.id, {
          status: 'running',
          container_id: outcome.applied.ref,
          address: outcome.applied.endpoint.host || null,
          expired_at: null,
          last_error: null,
          // Where it was placed, for good: its workspace is on that node from now on.
          ...(outcome.applied.node === undefined ? {} : { node: outcome.applied.node }),
          updated_at: now,
        });
        // Recorded with the outcome: a start that did not happen is not in the feed.
        if (e.status === 'creating') {
          await this.deps.activity.record(tx, { tenantId: e.tenant_id, action: 'environment.created', resourceType: 'environment', resourceId: e.id, details: { name: e.name, template_id: e.template_id } });
        } else if (e.status !== 'running') {
          await this.deps.activity.record(tx, { tenantId: e.tenant_id, action: 'environment.started', resourceType: 'environment', resourceId: e.id });
        }
        tx.afterCommit(this.deps.routesChanged);
        return;
      case 'failed':
        if (e.status === 'creating') {
          // A create gives a running environment or leaves nothing: the record goes now, the
          // container and the workspace with the workload (the creator answers 503).
          await tx.workloads.request('environment', e.id, 'absent', now);
          await tx.environments.delete(e.id, now, 'creating');
          return;
        }
        await tx.environments.update(e.id, {
          status: 'stopped',
          address: null,
          last_error:
            w.observed_state === 'lost' ? `the container stopped outside svc and did not start again: ${outcome.error}` : `the environment did not start: ${outcome.error}`,
          updated_at: now,
        });
        tx.afterCommit(this.deps.routesChanged);
        return;
      case 'waiting':
        if (outcome.nodeUnavailable) {
          // Its workspace's node is away (the error names it), or no node can take a new one (the
          // creation's wait ends at this outcome, and undoes it): not running meanwhile, and it
          // runs there again once the node is back, never elsewhere on an empty workspace.
          await tx.environments.update(e.id, { ...(e.status === 'running' ? { status: 'stopped' as const } : {}), address: null, last_error: outcome.error, updated_at: now });
          tx.afterCommit(this.deps.routesChanged);
          return;
        }
        // The engine's fault, not the tenant's: the controller tries again once it answers.
        await tx.environments.update(e.id, { last_error: `${ENGINE_AWAY}: ${outcome.error}`, updated_at: now });
        return;
      case 'stopped':
      case 'absent':
        // The request wrote the record (stopped, expired, or deleted) with the desired state.
        return;
    }
  }

  /**
   * Runs an environment container with a workspace volume of the same name: on the tenant's
   * network, labelled with its environment; or (tenantId null) unassigned in the warm pool,
   * labelled with its own name until an environment takes it, on the pool's network or, kept for
   * a tenant (`keptFor`), on that tenant's.
   */
  async run(o: { name: string; image: string; tenantId: string | null; keptFor?: string | null; resourceId: string; agentToken: string | null; signal: AbortSignal; cluster?: ClusterPlacement }): Promise<Applied> {
    const { name, image, tenantId, signal, agentToken, cluster } = o;
    const applied = await this.deps.runtime.apply({
      spec: {
        name,
        image,
        // The agent's token: svc-init takes it out of the environment before anything starts (an
        // environment of before agents has none, and its exec goes through the engine).
        env: o.agentToken === null ? {} : { [AGENT_TOKEN_ENV]: o.agentToken },
        ...(o.agentToken === null ? {} : { agentPort: AGENT_PORT }),
        tenantId: tenantId ?? o.keptFor ?? '',
        warmPool: tenantId === null,
        kind: 'environment',
        resourceId: o.resourceId,
        limits: { memoryMb: ENVIRONMENT_RESOURCES.memory_mb, cpus: ENVIRONMENT_RESOURCES.cpu_cores, pids: ENVIRONMENT_RESOURCES.pids },
        sandbox: await this.deps.sandbox(),
        // Idle until told otherwise; an init reaps what exec'd commands leave behind (svc-init, as
        // tenant code: what those commands print to the container's output is held to the log rate).
        entrypoint: ['sleep'],
        cmd: ['infinity'],
        init: true,
        tenantCode: true,
        volumes: [{ name, target: WORKSPACE }],
        // On a swarm: the agent published on its port of the node its workspace is on.
        ...(cluster ? { publish: { address: '', port: cluster.port }, placement: { node: cluster.node, holdsData: cluster.holdsData } } : {}),
      },
      pull: 'missing',
      // No port: ready once it runs on its network, and its agent (when it has one) answers there.
      ready: {
        timeoutMs: ENVIRONMENT_READY_TIMEOUT_MS,
        everyMs: ENVIRONMENT_READY_POLL_MS,
        probeTimeoutMs: AGENT_PROBE_TIMEOUT_MS,
        ...(agentToken === null ? {} : { probe: (at: Endpoint) => agentAnswers(agentAddress(at.host, cluster?.port ?? null, agentToken), AGENT_PROBE_TIMEOUT_MS) }),
      },
      // A newer request (a delete), or the controller losing its lease, stops it here.
      signal,
    });
    return applied;
  }
}
