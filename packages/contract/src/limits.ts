// Sizes a client checks before it sends, and names it reads, as plain values: a module without TypeBox, so that a
// client that needs only these (the CLI, through @svc/client) does not load the schemas
// (importing TypeBox took 0.2 s of every svc command's start).

/** The files API (beyond the spec) reads and writes files of at most this size. */
export const FILE_MAX_BYTES = 100 * 1024 * 1024;
/** An uploaded source archive (gzipped or plain tar), as sent: larger is 413. */
export const SOURCE_ARCHIVE_MAX_BYTES = 64 * 1024 * 1024;
/** What an uploaded archive's files may add up to unpacked (a git clone's cap too). */
export const SOURCE_UNPACKED_MAX_BYTES = 500 * 1024 * 1024;
/**
 * GET /v1/services/{id}?wait=N and GET /v1/services/{id}/builds/{build_id}?wait=N (beyond the
 * spec): a client following a deploy or a build asks once and is answered when it ends, instead
 * of asking again and again. At most 20 s, within the 30 s every normal request has; a longer
 * wait is a loop of these.
 */
export const WAIT_MAX_S = 20;
/** The header a streamed exec's answer names its command by, for the signal route (beyond the spec). */
export const EXEC_ID_HEADER = 'x-exec-id';

/**
 * The cookie that carries a dashboard session, `<session id>.<secret>` (web-sessions.ts). Outside
 * --dev its name has the `__Host-` prefix: a browser then takes it only from the API's own host,
 * Secure, for Path=/ and without Domain, so a tenant's app on a sibling host of the base domain
 * cannot plant one (SameSite does not stop siblings: they are the same site).
 */
export const SESSION_COOKIE = '__Host-svc_session';
/** Its name in --dev, where the browser talks plain HTTP to loopback (`__Host-` needs Secure). */
export const DEV_SESSION_COOKIE = 'svc_session';
/** The header a cookie-authenticated request that changes something must carry (the session's csrf_token). */
export const CSRF_HEADER = 'x-csrf-token';
/** How long a session lasts at most (12 hours); never past the expiry of the key it came from. */
export const SESSION_TTL_SECONDS = 12 * 3600;
/** The longest lease an environment takes, from now (spec 4, Environments: 30 days). */
export const LEASE_MAX_S = 30 * 24 * 3600;
/**
 * Snapshots a tenant keeps at most: a quota (409 `quota exceeded: ...`), never pruned, since a
 * snapshot is the tenant's own saved data. Each holds a sealed env of up to max_env_vars_per_service values.
 */
export const SNAPSHOTS_PER_TENANT_MAX = 50;
/** The most replicas one service runs (beyond the spec); each takes one service share of the tenant's quota. */
export const REPLICAS_MAX = 10;
