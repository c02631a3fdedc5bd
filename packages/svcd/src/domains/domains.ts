// Custom domains of services (issue 22, beyond the spec). A tenant adds a host name to one of its
// services and proves that it owns it with a TXT record (_svc-challenge.<name> = a token svc
// gives); then svc routes the name to the service and, with --tls on, makes Caddy obtain its
// certificate and watches it. Ownership is proven with DNS only: an HTTP token served through
// svc's own proxy would let any tenant claim a name whose DNS still points at svc after its owner
// left (a dangling record), which is how subdomain takeovers happen on hosting platforms.
//
// Many tenants may claim one name; the first to prove it takes it in host_names (the namespace of
// every host svc routes), and the others' claims fail. The checker (a periodic job under a lease)
// re-checks every claim on a schedule: pending ones until they are proven or give up, proven ones
// for the record (a name whose record is gone at three checks in a row is no longer routed) and
// for the certificate (obtained, and renewed before it expires).
import { domainChallengeName, type CreateDomainRequest, type Domain } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, QuotaExceededError } from '../errors.js';
import { hexId } from '../ids.js';
import type { JobLease } from '../jobs/periodic.js';
import type { Platform } from '../platform.js';
import type { CertificateState } from '../proxy/caddy.js';
import type { DomainCertificateStatus } from '../observability/operator-metrics.js';
import { proxyUrl, type RoutingOptions } from '../services/routing.js';
import { isUniqueViolation, type ServiceDomainRow } from '../store/index.js';
import type { DomainUpdate } from '../store/service-domains.js';
import { customHostname } from './hostnames.js';
import type { TxtLookup } from './txt-records.js';

export interface CertificateProbe {
  /** Waits up to timeoutMs (the probe's own default when absent). */
  certificateOf(hostname: string, timeoutMs?: number): Promise<CertificateState>;
}

const MINUTE = 60;
const HOUR = 60 * MINUTE;
/** How the checker paces itself (seconds). */
export const DOMAIN_CHECKS = {
  /** A pending claim: every minute for its first hour, then every 15 minutes, for 7 days. */
  pendingFast: MINUTE,
  pendingFastFor: HOUR,
  pendingSlow: 15 * MINUTE,
  pendingGiveUpAfter: 7 * 24 * HOUR,
  /**
   * A proven name without its certificate (being issued, or its probe failing, also after it was
   * active): every minute for 10 minutes after the proof, every 15 for a day, then as active ones.
   */
  issuingFast: MINUTE,
  issuingFastFor: 10 * MINUTE,
  issuingSlow: 15 * MINUTE,
  issuingSlowFor: 24 * HOUR,
  /** An active name: its record and certificate every 6 hours. */
  active: 6 * HOUR,
  /** Misses of the record, 6 hours or more apart, before a proven name is unrouted. */
  recordMissesAllowed: 3,
  /** How long the record's lookups may fail (no answer at all) before a proven name is unrouted. */
  lookupFailuresAllowedFor: 7 * 24 * HOUR,
} as const;
/** "Never", for next_check_at: a claim that gave up waits for POST .../verify. */
const NEVER = 253_402_300_799;
/** Claims the checker takes per run, and checks at once (one per tenant). */
const CHECK_BATCH = 50;
const CHECK_CONCURRENCY = 4;
/** After this long a run starts only first checks of tenants it has not checked yet; the next run takes the rest. */
export const CHECK_RUN_BUDGET_MS = 60_000;
/**
 * How long POST .../verify waits for a certificate: with the TXT lookup (8 s at most,
 * txt-records.ts) and the store, it stays under the 30 s a request may last.
 */
const VERIFY_PROBE_MS = 10_000;
/** POST .../verify checks again only this long after the last check. */
export const VERIFY_COOLDOWN_S = 10;

export interface DomainsDeps extends Pick<Platform, 'store' | 'activity' | 'clock' | 'log'> {
  routing: RoutingOptions;
  txt: TxtLookup;
  /** With --tls on: the certificates Caddy serves. Without, a proven name is active at once. */
  certificates: CertificateProbe | null;
  routesChanged: () => void;
  /**
   * The soonest an active name is looked at again, in seconds: a minute (tests of renewal with
   * certificates that live seconds, less).
   */
  soonestRecheckS?: number;
}

export class Domains {
  /** The operator figures: the last read, and the read under way. */
  private figures: DomainCertificateStatus | null = null;
  private refreshing = false;

  constructor(private readonly deps: DomainsDeps) {}

  /**
   * The operator figures as last read, starting a new read when none runs: a metrics scrape never
   * waits for the store (SQLite's one connection may be in a long transaction), and so shows
   * figures at most one scrape old.
   */
  operatorFigures(): DomainCertificateStatus | null {
    if (!this.refreshing) {
      this.refreshing = true;
      const { serviceDomains } = this.deps.store;
      void (async () => ({
        byStatus: await serviceDomains.countByStatus(),
        expiringWithinWeek: await serviceDomains.countExpiringBefore(unixSeconds(this.deps.clock) + 7 * 24 * HOUR),
      }))()
        .then((figures) => (this.figures = figures))
        .catch((err: unknown) => this.deps.log.warn({ err }, 'custom domain figures could not be read'))
        .finally(() => (this.refreshing = false));
    }
    return this.figures;
  }

  async add(tenantId: string, serviceId: string, req: CreateDomainRequest): Promise<Domain> {
    const hostname = customHostname(req.hostname, this.deps.routing.baseDomain);
    const now = unixSeconds(this.deps.clock);
    const id = hexId(12);
    try {
      await this.deps.store.transaction(async (tx) => {
        // Concurrent adds of one tenant count one after another.
        await tx.tenants.lockForQuota(tenantId);
        const tenant = await tx.tenants.findById(tenantId);
        const service = await tx.services.find(tenantId, serviceId);
        if (!tenant || !service) throw new NotFoundError('service');
        if ((await tx.serviceDomains.countForService(serviceId)) >= tenant.max_domains_per_service) {
          throw new QuotaExceededError(`maximum custom domains per service is ${tenant.max_domains_per_service}`);
        }
        // A name proven by anyone (or one of svc's own hosts) is taken; unproven claims of other
        // tenants are not: whoever proves the name first gets it.
        const holder = await tx.hostNames.find(hostname);
        if (holder) throw new ConflictError(holder.tenant_id === tenantId ? alreadyAdded(hostname) : `${hostname} is in use by another service`);
        await tx.serviceDomains.insert({
          id,
          tenant_id: tenantId,
          service_id: serviceId,
          hostname,
          token: hexId(16),
          status: 'pending_verification',
          last_error: null,
          verified_at: null,
          certificate_expires_at: null,
          checked_at: null,
          next_check_at: now,
          created_at: now,
        });
        await this.deps.activity.record(tx, { tenantId, action: 'domain.added', resourceType: 'domain', resourceId: id, serviceId, details: { hostname } });
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError(alreadyAdded(hostname));
      throw err;
    }
    return this.get(tenantId, serviceId, id);
  }

  async list(tenantId: string, serviceId: string): Promise<Domain[]> {
    if (!(await this.deps.store.services.find(tenantId, serviceId))) throw new NotFoundError('service');
    return (await this.deps.store.serviceDomains.listForService(tenantId, serviceId)).map((r) => this.view(r));
  }

  async get(tenantId: string, serviceId: string, id: string): Promise<Domain> {
    return this.view(await this.row(tenantId, serviceId, id));
  }

  async remove(tenantId: string, serviceId: string, id: string): Promise<void> {
    const row = await this.row(tenantId, serviceId, id);
    await this.deps.store.transaction(async (tx) => {
      // The row first (it locks it; a proof under way updates it before it claims the name, so
      // it committed before and its name is released below, or it finds no row), then the name.
      if (!(await tx.serviceDomains.delete(tenantId, id))) throw new NotFoundError('domain');
      await tx.hostNames.releaseDomains([id]);
      await this.deps.activity.record(tx, { tenantId, action: 'domain.removed', resourceType: 'domain', resourceId: id, serviceId, details: { hostname: row.hostname } });
    });
    this.deps.routesChanged();
  }

  /**
   * POST .../verify: checks the claim now instead of at its next turn, and answers the outcome.
   * A certificate being ordered may take longer than a request may last: the probe waits a
   * bounded time, and the checker carries on after.
   */
  async verifyNow(tenantId: string, serviceId: string, id: string): Promise<Domain> {
    await this.row(tenantId, serviceId, id);
    // Each check asks the tenant's name servers and may make Caddy order a certificate: one in
    // VERIFY_COOLDOWN_S is enough (taken in the store, so concurrent requests share it); a repeat
    // answers the last outcome.
    if (await this.deps.store.serviceDomains.reserveCheck(id, unixSeconds(this.deps.clock), VERIFY_COOLDOWN_S)) {
      await this.check(await this.row(tenantId, serviceId, id), VERIFY_PROBE_MS);
    }
    return this.get(tenantId, serviceId, id);
  }

  /**
   * The checker's run: the claims whose turn came, a few at a time, while the lease holds. Fair
   * between tenants, whose name servers may be slow on purpose (a check can take 53 s): the batch
   * takes each tenant's most overdue claim before anyone's second (the store ranks them), and a
   * tenant has one check at a time, so the others keep the remaining workers. After
   * CHECK_RUN_BUDGET_MS a run starts only first checks of tenants it has not checked yet: a
   * tenant's long queue waits for the next run, which reads the batch again (claims due since
   * take their turn there).
   */
  async checkDue(lease: JobLease): Promise<void> {
    const started = this.deps.clock.now();
    const waiting = await this.deps.store.serviceDomains.due(unixSeconds(this.deps.clock), CHECK_BATCH);
    const checking = new Set<string>();
    const checked = new Set<string>();
    const worker = async () => {
      while (!lease.signal.aborted) {
        const withinBudget = this.deps.clock.now() - started < CHECK_RUN_BUDGET_MS;
        // When every claim left is of a tenant being checked, that tenant's worker goes on with them.
        const i = waiting.findIndex((r) => !checking.has(r.tenant_id) && (withinBudget || !checked.has(r.tenant_id)));
        const row = i < 0 ? undefined : waiting.splice(i, 1)[0];
        if (!row) return;
        checking.add(row.tenant_id);
        checked.add(row.tenant_id);
        try {
          await this.check(row);
        } catch (err) {
          this.deps.log.warn({ err, domain: row.id }, 'domain check failed');
        } finally {
          checking.delete(row.tenant_id);
        }
      }
    };
    await Promise.all(Array.from({ length: CHECK_CONCURRENCY }, worker));
  }

  /** One check of one claim, written only if the claim did not change meanwhile. */
  private async check(seen: ServiceDomainRow, probeMs?: number): Promise<void> {
    const answer = await this.deps.txt.lookup(domainChallengeName(seen.hostname));
    const proven = 'values' in answer && answer.values.some((v) => v.trim() === seen.token);
    if (seen.verified_at === null) {
      if (proven) await this.prove(seen);
      else await this.stillPending(seen, this.recordProblem(seen, answer));
      return;
    }
    const now = unixSeconds(this.deps.clock);
    const problem = this.recordProblem(seen, answer);
    const lookupFailed = 'error' in answer;
    const record: DomainUpdate = { failures: seen.failures, missed_at: seen.missed_at, lookup_failing_since: seen.lookup_failing_since };
    let recordNote: string | null = null;
    if (proven) {
      Object.assign(record, { failures: 0, missed_at: null, lookup_failing_since: null });
    } else if (lookupFailed) {
      // A failed lookup (svc's resolver down, a name server not answering) is no evidence that
      // the record is gone; only lookups failing for days are (a zone deleted, a lame delegation).
      record.lookup_failing_since = seen.lookup_failing_since ?? now;
      if (now - record.lookup_failing_since >= DOMAIN_CHECKS.lookupFailuresAllowedFor) {
        await this.unprove(seen, `ownership is no longer proven: ${problem}, at every check for 7 days; the name is not routed any more (fix its DNS, then verify)`);
        return;
      }
      recordNote = problem;
    } else {
      // A miss counts once per active interval: a proven name without its certificate is checked
      // every minute, and a name server may lag behind a record just made.
      record.lookup_failing_since = null;
      if (seen.missed_at === null || now - seen.missed_at >= DOMAIN_CHECKS.active) Object.assign(record, { failures: seen.failures + 1, missed_at: now });
      const failures = record.failures ?? 0;
      if (failures >= DOMAIN_CHECKS.recordMissesAllowed) {
        await this.unprove(seen, `ownership is no longer proven: ${problem} at ${failures} checks, 6 hours or more apart; the name is not routed any more (add the record again, then verify)`);
        return;
      }
      recordNote = `${problem} (check ${failures} of ${DOMAIN_CHECKS.recordMissesAllowed}, 6 hours or more apart, before the name is unrouted)`;
    }
    const certificates = this.deps.certificates;
    if (!certificates) {
      await this.write(seen, { ...record, status: 'active', last_error: recordNote, checked_at: now, next_check_at: now + DOMAIN_CHECKS.active });
      return;
    }
    const cert = await certificates.certificateOf(seen.hostname, probeMs);
    const checkedAt = unixSeconds(this.deps.clock);
    if ('error' in cert) {
      // Each probe may start an order at the CA (Caddy backs off between its own attempts too):
      // less and less often, since the account's order limits are shared by every tenant.
      const since = checkedAt - seen.verified_at;
      const wait = since < DOMAIN_CHECKS.issuingFastFor ? DOMAIN_CHECKS.issuingFast : since < DOMAIN_CHECKS.issuingSlowFor ? DOMAIN_CHECKS.issuingSlow : DOMAIN_CHECKS.active;
      const patch: DomainUpdate = {
        status: 'failed',
        // The cause is told from the CA's error of this attempt only; an earlier attempt's is a
        // dated note, and the probe's own socket error names no cause.
        last_error: `${cert.fromIssuer ? certificateProblem(cert.error, this.deps.routing.baseDomain) : `the proxy served no certificate for the name yet (${cert.error})`}${cert.earlier ? `; ${cert.earlier}` : ''}`,
        checked_at: checkedAt,
        next_check_at: checkedAt + wait,
        ...record,
      };
      if ((await this.write(seen, patch)) && seen.status !== 'failed') await this.recordStatus(seen, 'domain.failed', { error: patch.last_error });
      return;
    }
    const standing = certificateStanding(cert, checkedAt, recordNote);
    // Short-lived certificates are looked at again before their renewal is due. An expired one
    // as a failed issue is (each probe's handshake may start an order, and the CA's limits are
    // every tenant's): every 15 minutes.
    const left = cert.validTo - checkedAt;
    const nextCheck = checkedAt + (standing.status === 'failed' ? DOMAIN_CHECKS.issuingSlow : Math.max(this.deps.soonestRecheckS ?? MINUTE, Math.min(DOMAIN_CHECKS.active, Math.floor(left / 6))));
    const was = seen.status;
    if (await this.write(seen, { ...record, status: standing.status, last_error: standing.lastError, certificate_expires_at: cert.validTo, checked_at: checkedAt, next_check_at: nextCheck })) {
      // Its first certificate: plain HTTP, which served the name meanwhile, redirects it now.
      if (seen.certificate_expires_at === null) this.deps.routesChanged();
      if (standing.status === 'active' && was !== 'active') await this.recordStatus(seen, 'domain.active', { certificate_expires_at: cert.validTo });
      if (standing.status === 'failed' && was !== 'failed') await this.recordStatus(seen, 'domain.failed', { error: standing.lastError });
    }
  }

  /** The record is there: the name is this claim's, unless another tenant proved it first. */
  private async prove(seen: ServiceDomainRow): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    // Without TLS a proven name is active at once; with it, the certificate comes next (at once).
    const status = this.deps.certificates ? 'issuing' : 'active';
    const nextCheck = this.deps.certificates ? now : now + DOMAIN_CHECKS.active;
    try {
      await this.deps.store.transaction(async (tx) => {
        // The row first: it locks it against a removal of the domain or its service under way
        // (which delete the row, then release the name), so that no name outlives its claim.
        const written = await tx.serviceDomains.update(seen, { status, last_error: null, verified_at: now, checked_at: now, next_check_at: nextCheck, failures: 0, missed_at: null, lookup_failing_since: null });
        if (!written) throw new ClaimChangedError();
        await tx.hostNames.claim({ hostname: seen.hostname, tenant_id: seen.tenant_id, kind: 'domain', resource_id: seen.id, created_at: now });
        await this.deps.activity.record(tx, { tenantId: seen.tenant_id, action: 'domain.verified', resourceType: 'domain', resourceId: seen.id, serviceId: seen.service_id, details: { hostname: seen.hostname } });
      });
    } catch (err) {
      if (err instanceof ClaimChangedError) return;
      if (!isUniqueViolation(err)) throw err;
      // A check of the same claim that ran at the same time proved it: nothing more to do.
      if ((await this.deps.store.hostNames.find(seen.hostname))?.resource_id === seen.id) return;
      // Taken since the claim was made: by another tenant's proof, or by one of svc's own hosts.
      await this.write(seen, { status: 'failed', last_error: `${seen.hostname} is in use by another service (its owner proved it first)`, checked_at: now, next_check_at: NEVER, failures: 0 });
      return;
    }
    this.deps.routesChanged();
  }

  private async stillPending(seen: ServiceDomainRow, problem: string): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const age = now - seen.created_at;
    if (age >= DOMAIN_CHECKS.pendingGiveUpAfter) {
      const patch: DomainUpdate = { status: 'failed', last_error: `ownership was not proven in 7 days (${problem}); add the record, then verify`, checked_at: now, next_check_at: NEVER };
      if ((await this.write(seen, patch)) && seen.status !== 'failed') await this.recordStatus(seen, 'domain.failed', { error: patch.last_error });
      return;
    }
    const wait = age < DOMAIN_CHECKS.pendingFastFor ? DOMAIN_CHECKS.pendingFast : DOMAIN_CHECKS.pendingSlow;
    await this.write(seen, { status: seen.status === 'failed' ? 'failed' : 'pending_verification', last_error: problem, checked_at: now, next_check_at: now + wait });
  }

  /** The record is gone for good: the name is released and no longer routed. */
  private async unprove(seen: ServiceDomainRow, problem: string): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    try {
      await this.deps.store.transaction(async (tx) => {
        const written = await tx.serviceDomains.update(seen, { status: 'failed', last_error: problem, verified_at: null, certificate_expires_at: null, checked_at: now, next_check_at: now + DOMAIN_CHECKS.pendingSlow, failures: 0, missed_at: null, lookup_failing_since: null });
        if (!written) throw new ClaimChangedError();
        await tx.hostNames.releaseDomains([seen.id]);
        await this.deps.activity.record(tx, { tenantId: seen.tenant_id, action: 'domain.unverified', resourceType: 'domain', resourceId: seen.id, serviceId: seen.service_id, details: { hostname: seen.hostname, error: problem } });
      });
    } catch (err) {
      if (err instanceof ClaimChangedError) return;
      throw err;
    }
    this.deps.routesChanged();
  }

  private recordProblem(seen: ServiceDomainRow, answer: Awaited<ReturnType<TxtLookup['lookup']>>): string {
    const name = domainChallengeName(seen.hostname);
    if ('error' in answer) return `the DNS lookup of ${name} failed (${answer.error})`;
    if (answer.values.length === 0) return `no TXT record ${name} was found`;
    return `the TXT record ${name} does not hold this domain's verification value`;
  }

  private async write(seen: ServiceDomainRow, patch: DomainUpdate): Promise<boolean> {
    return this.deps.store.serviceDomains.update(seen, patch);
  }

  private async recordStatus(seen: ServiceDomainRow, action: string, details: Record<string, unknown>): Promise<void> {
    await this.deps.activity.record(this.deps.store, { tenantId: seen.tenant_id, action, resourceType: 'domain', resourceId: seen.id, serviceId: seen.service_id, details: { hostname: seen.hostname, ...details } });
  }

  private async row(tenantId: string, serviceId: string, id: string): Promise<ServiceDomainRow> {
    const row = await this.deps.store.serviceDomains.find(tenantId, serviceId, id);
    if (!row) throw new NotFoundError('domain');
    return row;
  }

  private view(r: ServiceDomainRow): Domain {
    return {
      id: r.id,
      service_id: r.service_id,
      hostname: r.hostname,
      status: r.status,
      verification: { type: 'dns_txt', name: domainChallengeName(r.hostname), value: r.token },
      url: r.verified_at !== null ? proxyUrl(r.hostname, this.deps.routing) : null,
      last_error: r.last_error,
      verified_at: r.verified_at,
      certificate_expires_at: r.certificate_expires_at,
      checked_at: r.checked_at,
      created_at: r.created_at,
    };
  }
}

function alreadyAdded(hostname: string): string {
  return `${hostname} is added already (to this or another of your services)`;
}

/** Another check or a removal changed the claim between its read and this write. */
class ClaimChangedError extends Error {}

/**
 * What the certificate the proxy serves for a proven name says of it at `at` (seconds): active
 * while it is valid, with a note once its renewal is late (Caddy renews when a third of its
 * lifetime is left; with a sixth left, renewal is failing); failed once it expired, since a
 * browser refuses it (Caddy should not serve one, but the status must not say active if it does).
 */
export function certificateStanding(cert: { validFrom: number; validTo: number }, at: number, recordNote: string | null): { status: 'active' | 'failed'; lastError: string | null } {
  const expiry = new Date(cert.validTo * 1000).toISOString();
  const left = cert.validTo - at;
  if (left <= 0) return { status: 'failed', lastError: `the certificate expired at ${expiry} and was not renewed (svc keeps trying)${recordNote ? `; ${recordNote}` : ''}` };
  if (left < (cert.validTo - cert.validFrom) / 6) return { status: 'active', lastError: `the certificate expires at ${expiry} and has not been renewed yet (svc keeps trying)` };
  return { status: 'active', lastError: recordNote };
}

/** What Caddy's ACME error means for the tenant, and what to do about it. */
export function certificateProblem(raw: string, baseDomain: string | null): string {
  const detail = raw.length > 300 ? `${raw.slice(0, 300)}...` : raw;
  if (/caa/i.test(raw)) return `a CAA record of the name forbids the certificate authority svc uses: allow it there (${detail})`;
  if (/ratelimit|rate limit|too many/i.test(raw)) return `the certificate authority's rate limit was reached; svc tries again later (${detail})`;
  if (/unauthorized|connection|dns|nxdomain|timeout|incorrect|invalid response/i.test(raw)) {
    const target = baseDomain ? ` (A/AAAA records of svc's proxy, or a CNAME to a host under ${baseDomain})` : '';
    return `the certificate authority could not reach the name at svc: point its DNS here${target} (${detail})`;
  }
  return `the certificate could not be obtained (${detail})`;
}
