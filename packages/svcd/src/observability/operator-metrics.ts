// Operator observability: Prometheus metrics through prom-client, in a registry of this svcd's
// own (never prom-client's global one), so that two servers in one process keep apart.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Clock } from '../clock.js';
import type { SamplerStatus } from '../metering/sampler.js';
import type { DiskMeterStatus } from '../disk/disk-quota.js';
import type { ActivityEvent } from '../activity/activity.js';
import type { RateLimitedError } from '../errors.js';
import type { PortFigures } from '../provisioning/published-ports.js';

/** Custom domains by status, and the certified ones whose certificate ends within a week (renewal late). */
export interface DomainCertificateStatus {
  byStatus: Array<{ status: string; n: number }>;
  expiringWithinWeek: number;
}

/** The activity actions that finish a deployment or a build, and the outcome each counts as. */
const FINISHED = new Map<string, { of: 'deployment' | 'build'; outcome: 'succeeded' | 'failed' | 'cancelled' }>(
  (['deployment', 'build'] as const).flatMap((of) => (['succeeded', 'failed', 'cancelled'] as const).map((outcome) => [`${of}.${outcome}`, { of, outcome }] as const)),
);

export class OperatorMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'method' | 'route' | 'status'>;
  private readonly duration: Histogram<'method' | 'route' | 'status'>;
  private readonly rateLimited: Counter<'limiter'>;
  private readonly deploys: Counter<'outcome'>;
  private readonly builds: Counter<'outcome'>;

  constructor(sampler: () => SamplerStatus, clock: Clock, disk: () => DiskMeterStatus, domains: () => DomainCertificateStatus | null, swarmPorts: () => PortFigures | null) {
    const registers = [this.registry];
    // Process figures (CPU, memory, event-loop lag, handles) for the svcd process itself.
    collectDefaultMetrics({ register: this.registry, prefix: 'svc_process_' });
    this.requests = new Counter({
      name: 'svc_http_requests_total',
      help: 'API requests answered, by method, route pattern and status',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.duration = new Histogram({
      name: 'svc_http_request_duration_seconds',
      help: 'API request latency, by method, route pattern and status',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.rateLimited = new Counter({
      name: 'svc_rate_limit_rejections_total',
      help: 'Requests refused with 429, by limiter',
      labelNames: ['limiter'],
      registers,
    });
    this.deploys = new Counter({ name: 'svc_deploys_total', help: 'Deployments finished, by outcome', labelNames: ['outcome'], registers });
    this.builds = new Counter({ name: 'svc_builds_total', help: 'Builds finished, by outcome', labelNames: ['outcome'], registers });
    new Gauge({
      name: 'svc_containers',
      help: "svc's containers on the engine by state, as of the sampler's last pass",
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(sampler().containersByState)) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'svc_metering_sampler_lag_seconds',
      help: "Age of the usage sampler's last completed pass (grows when sampling stalls; -1 before the first)",
      registers,
      collect() {
        const at = sampler().lastPassAt;
        this.set(at === null ? -1 : (clock.now() - at) / 1000);
      },
    });
    // From the store, but never waited for: a scrape answers the last figures (domains.ts), and
    // none before the first.
    new Gauge({
      name: 'svc_domains',
      help: "Tenants' custom domains, by status (as of the last refresh, at most a scrape old)",
      labelNames: ['status'],
      registers,
      collect() {
        const d = domains();
        if (!d) return;
        for (const status of ['pending_verification', 'issuing', 'active', 'failed']) this.set({ status }, d.byStatus.find((r) => r.status === status)?.n ?? 0);
      },
    });
    new Gauge({
      name: 'svc_domain_certificates_expiring_within_week',
      help: "Custom domains whose served certificate ends within 7 days: Caddy renews a third of the lifetime ahead (30 days for Let's Encrypt's), so these are renewals that keep failing",
      registers,
      collect() {
        const d = domains();
        if (d) this.set(d.expiringWithinWeek);
      },
    });
    new Gauge({
      name: 'svc_swarm_ports',
      help: 'On a swarm: ports of --swarm-ports free for new services (neither held by a service, resting after its deletion, nor promised to a service not deployed yet) and in all (as of the last refresh, at most a scrape old; absent on one engine)',
      labelNames: ['state'],
      registers,
      collect() {
        const p = swarmPorts();
        if (!p) return;
        this.set({ state: 'free' }, p.free);
        this.set({ state: 'total' }, p.total);
      },
    });
    new Gauge({
      name: 'svc_tenant_disk_bytes',
      help: "Disk all tenants' workloads take (writable layers, volumes, built images), as of the last disk measurement",
      registers,
      collect() {
        this.set(disk().usedBytes);
      },
    });
    new Gauge({
      name: 'svc_tenants_over_disk_quota',
      help: 'Tenants at or over max_disk_gb (new workloads refused), and past its hard margin (workloads stopped), as of the last measurement',
      labelNames: ['level'],
      registers,
      collect() {
        const s = disk();
        this.set({ level: 'quota' }, s.atQuota);
        this.set({ level: 'hard_limit' }, s.pastHardLimit);
      },
    });
    new Gauge({
      name: 'svc_disk_measurement_age_seconds',
      help: 'Age of the last disk measurement (grows when the engine df stalls or fails; -1 before the first)',
      registers,
      collect() {
        const at = disk().measuredAt;
        this.set(at === null ? -1 : (clock.now() - at) / 1000);
      },
    });
    new Gauge({
      name: 'svc_metering_sampler_failures',
      help: "Container readings that failed in the sampler's last pass",
      registers,
      collect() {
        this.set(sampler().lastPassFailures);
      },
    });
  }

  /** One answered request; `route` is the route pattern (never the raw path: bounded labels). */
  requestDone(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status: String(status) };
    this.requests.inc(labels);
    this.duration.observe(labels, seconds);
  }

  rateLimitRejected(limiter: RateLimitedError['limiter']): void {
    this.rateLimited.inc({ limiter });
  }

  /** Activity once it is committed: finished deployments and builds are counted by outcome. */
  activityRecorded(event: Pick<ActivityEvent, 'action'>): void {
    const finished = FINISHED.get(event.action);
    if (finished) (finished.of === 'deployment' ? this.deploys : this.builds).inc({ outcome: finished.outcome });
  }

  /** The text exposition format. */
  async text(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
