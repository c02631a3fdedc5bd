// What a route declares about itself; the guards read it. One place, so a route's access rules
// are visible where the route is defined.

export type RouteAuth =
  /** No credentials. */
  | 'public'
  /** A tenant API key. */
  | 'key'
  /** The bootstrap token, unless --dev --open-registration. */
  | 'bootstrap'
  /** The admin token (or the bootstrap token while no admin token is configured). */
  | 'operator';

export interface SvcRouteConfig {
  auth: RouteAuth;
  /**
   * A key route that an operator token may also read (the dashboard's operator pages show the
   * health detail without a tenant's key).
   */
  operatorAlso?: boolean;
  /**
   * An operator route that only the admin token opens, never the deprecated bootstrap fallback
   * (reads of every tenant: the bootstrap token is often handed to people so they can register).
   */
  adminOnly?: boolean;
  /** Counts against the registration limiter (register, recover, reactivate, quota patch, validate). */
  registrationLimited?: boolean;
  /** No 30 s request timeout (logs, exec, long creates). */
  longRunning?: boolean;
  /** Idempotency-Key is ignored (exec: running a command twice is what a retry asks for). */
  noIdempotency?: boolean;
  /** Exempt from the global limit and the HTTPS rule: the liveness probe must always answer. */
  liveness?: boolean;
  /**
   * How long the request's body may take to arrive (ms), for uploads of many megabytes; every
   * other route has the spec's 10 s read timeout (api/timeouts.ts).
   */
  bodyReadMs?: number;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    svc?: SvcRouteConfig;
  }
  interface FastifyRequest {
    principal?: import('../auth/authenticator.js').Principal;
    /** Set when the request was authenticated by a dashboard session cookie instead of a key. */
    webSession?: import('../auth/web-sessions.js').SessionPrincipal;
    rawBody?: string;
    idempotencyClaim?: { tenantId: string; key: string };
  }
}
