// What svc keeps, and for how long: the windows an operator sets (flags) and the per-tenant caps
// that bound what one tenant can make the store hold (README, Decisions > Retention). The sweep
// that applies them is retention.ts; the snapshot quota is checked where snapshots are created.

/** The operator's windows, in days (flags `--*-retention-days`). */
export interface RetentionWindows {
  /** Activity entries older than this are deleted. */
  activityDays: number;
  /** Finished deployments that finished longer ago are deleted (the protected ones stay). */
  deploymentDays: number;
  /** Builds that finished longer ago lose their log (the build record stays). */
  buildLogDays: number;
  /** Revoked keys this long after revocation, and expired ones this long after expiry, are deleted. */
  keyDays: number;
}

export const DEFAULT_RETENTION: RetentionWindows = {
  // A quarter: long enough to answer "what happened last month" in the feed and in a service's
  // deployment history, like the metering rollups' default.
  activityDays: 90,
  deploymentDays: 90,
  // Logs are large (up to 5 MB a build) and read while a build is fresh; the record of the build
  // (status, commit, error, image) stays.
  buildLogDays: 30,
  // A revoked or expired key authenticates nothing; a month leaves time to tell from the record
  // which key a failing client still sends.
  keyDays: 30,
};

/** Bounds of every window flag. */
export const RETENTION_DAYS_MIN = 1;
export const RETENTION_DAYS_MAX = 3650;

/**
 * Activity entries kept per tenant, newest first: the feed pages 200 at a time, and a tenant that
 * writes thousands of entries a day (a CI loop) would otherwise grow it without bound within the
 * window. Older entries are deleted by the sweep.
 */
export const ACTIVITY_PER_TENANT_MAX = 10_000;

/** A service's newest deployments are kept whatever their age, so its history never ends up empty. */
export const DEPLOYMENTS_KEPT_PER_SERVICE = 10;
/**
 * Finished deployments kept per service whatever their age: every restart writes one, so a tenant
 * restarting in a loop would grow them without bound within the window. One page of the list (200).
 */
export const DEPLOYMENTS_PER_SERVICE_MAX = 200;

/**
 * Builds of a service that keep their log whatever their age: the newest. Older ones lose their log
 * even inside the window, since each may hold 5 MB and a build loop would otherwise fill the store.
 */
export const BUILD_LOGS_KEPT_PER_SERVICE = 50;
/** Build records kept per service (finished ones past this are deleted, their logs first). */
export const BUILDS_PER_SERVICE_MAX = 200;

/**
 * Revoked keys kept per tenant, most recently revoked first: the 20-key quota counts only
 * non-revoked keys, so create-and-revoke in a loop would grow them without bound.
 */
export const REVOKED_KEYS_PER_TENANT_MAX = 100;

/** Snapshots per tenant: a quota, never pruned (in the contract: the dashboard reads them all at once). */
export { SNAPSHOTS_PER_TENANT_MAX } from '@svc/contract/limits';
