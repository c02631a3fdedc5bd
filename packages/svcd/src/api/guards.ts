// The access pipeline, in the order it runs for every request but the liveness probe:
// HTTPS rule -> client-IP limit -> global limit -> registration limit -> credentials -> tenant limit.
//
// The client-IP limit is for requests that hold no valid credential: it comes before the global
// bucket, so that one address flooding without a key (or with wrong ones) is refused by its own
// limiter and cannot drain the bucket every tenant shares. Requests that present something are
// judged by what they present:
// - an API key skips the client-IP limit, and a key that fails is charged to it afterwards; once
//   the address has spent its allowance, a key is checked before the global bucket is touched and
//   only a valid one goes on (a tenant behind that address is not starved by its neighbours), and
//   only a key already in this process's cache is checked at all (no store query per made-up key);
// - a dashboard session cookie (only when no Authorization header is sent) is judged as a key is,
//   and a request that changes something must also carry the session's CSRF token, from the
//   page's own origin (auth/web-sessions.ts);
// - an operator token is checked first: a valid one is charged to neither the client-IP nor the
//   registration limiter (strangers exhausting those must not lock the operator out), a refused
//   one to both.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../app.js';
import type { OperatorCredential } from '../auth/operator.js';
import type { Principal } from '../auth/authenticator.js';
import { CSRF_HEADER } from '@svc/contract';
import { crossOriginRefusal } from './origin.js';
import { clearedSessionCookie, presentedSession, sessionCookieName } from './session-cookie.js';
import { ForbiddenError, InternalError, RateLimitedError, UnauthorizedError, UnavailableError } from '../errors.js';
import { clientIp, isLoopback } from './client-ip.js';
import type { SvcRouteConfig } from './route-config.js';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function accessGuard(deps: Deps) {
  const { config, rateLimits, authenticator, operatorTokens, audit, webSessions } = deps;
  const cookieName = sessionCookieName(!config.dev);

  /** The tenant's own limit, once its credential holds. */
  function admitTenant(request: FastifyRequest, reply: FastifyReply, principal: Principal): void {
    if (!principal.tenantId) throw new InternalError('authenticated request without a tenant id');
    request.principal = principal;
    const r = rateLimits.takeTenant(principal.tenantId);
    void reply.header('x-ratelimit-limit', String(rateLimits.tenantLimit));
    void reply.header('x-ratelimit-remaining', String(r.remaining));
    if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds, 'tenant');
  }

  async function sessionAccess(request: FastifyRequest, reply: FastifyReply, ip: string, cookie: string): Promise<void> {
    // Every session is read from the store: an address that has spent its allowance on failures
    // goes on only with a session this process has seen hold lately (as with cached keys), so
    // made-up cookies get no more reads and its valid sessions are not starved by them.
    if (!rateLimits.clientIpHasAllowance(ip) && !webSessions.recentlyValid(cookie)) rateLimits.takeClientIp(ip);
    rateLimits.takeGlobal();
    let session;
    try {
      session = await webSessions.authenticate(cookie);
    } catch (err) {
      if (err instanceof UnauthorizedError) rateLimits.chargeClientIp(ip);
      throw err;
    }
    // The tenant's own limit first: a refusal below costs the tenant too, so a valid session
    // cannot send refused requests against the shared global bucket alone.
    admitTenant(request, reply, session);
    // SameSite=Strict keeps the cookie off cross-site requests, not off sibling hosts (tenants'
    // services share the API's base domain); the origin and token checks hold regardless (a
    // WebSocket's upgrade is a GET: its origin counts).
    const refusal = crossOriginRefusal(request);
    if (refusal !== null) throw new ForbiddenError(refusal);
    if (!SAFE_METHODS.has(request.method) && !webSessions.csrfMatches(session, header(request, CSRF_HEADER))) {
      throw new ForbiddenError(`missing or invalid CSRF token (${CSRF_HEADER})`);
    }
    request.webSession = session;
  }

  async function keyAccess(request: FastifyRequest, reply: FastifyReply, ip: string): Promise<void> {
    const authorization = header(request, 'authorization');
    const presented = authorization !== undefined;
    const cookie = presented ? ({ kind: 'none' } as const) : presentedSession(header(request, 'cookie'), cookieName);
    if (cookie.kind === 'several') {
      rateLimits.takeClientIp(ip);
      void reply.header('set-cookie', clearedSessionCookie(!config.dev));
      throw new UnauthorizedError('more than one session cookie: sign in again');
    }
    if (cookie.kind === 'one') return sessionAccess(request, reply, ip, cookie.value);
    if (!presented) rateLimits.takeClientIp(ip);
    const mustProveFirst = presented && !rateLimits.clientIpHasAllowance(ip);
    // A spent address may go on only with a key known here already: checking any other would
    // cost a store query, and made-up keys would then reach the store without limit.
    if (mustProveFirst && !authenticator.isCached(authorization)) rateLimits.takeClientIp(ip);
    if (!mustProveFirst) rateLimits.takeGlobal();
    let principal: Principal;
    try {
      principal = await authenticator.authenticate(authorization);
    } catch (err) {
      if (presented && err instanceof UnauthorizedError) {
        // Spent already: 429 from the address's own limiter. Otherwise the failure is charged, and the 401 stands.
        if (mustProveFirst) rateLimits.takeClientIp(ip);
        else rateLimits.chargeClientIp(ip);
      }
      throw err;
    }
    if (mustProveFirst) rateLimits.takeGlobal();
    admitTenant(request, reply, principal);
  }

  function operatorAccess(request: FastifyRequest, route: SvcRouteConfig, ip: string): void {
    let used: OperatorCredential;
    try {
      used = operatorTokens.authorize({
        admin: header(request, 'x-admin-token'),
        bootstrap: header(request, 'x-bootstrap-token'),
      });
    } catch (err) {
      // A refused token uses up allowances like a request without one (spec 8: invalid tokens
      // consume the registration limiter), and a 429 comes before the 401 or 403.
      rateLimits.takeClientIp(ip);
      rateLimits.takeGlobal();
      if (route.registrationLimited) rateLimits.takeRegistration(ip);
      throw err;
    }
    rateLimits.takeGlobal();
    if (used === 'bootstrap' && route.adminOnly) throw new ForbiddenError('this operator route needs the admin token (SVC_ADMIN_TOKEN)');
    if (used === 'bootstrap') {
      audit.warn({ audit: true, route: request.routeOptions.url }, 'bootstrap token used on an operator route (deprecated: configure SVC_ADMIN_TOKEN)');
    }
  }

  return async function guard(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const route: SvcRouteConfig | undefined = request.routeOptions.config.svc;
    if (!route) return; // unknown route: the not-found handler answers, at no cost to anyone
    // The liveness probe must always answer: no HTTPS rule, no limit.
    if (route.liveness) return;

    // Spec 5.9: behind the local TLS-terminating proxy, plain HTTP is refused in production.
    if (!config.dev && isLoopback(request.socket.remoteAddress) && header(request, 'x-forwarded-proto') !== 'https') {
      throw new ForbiddenError('HTTPS required');
    }
    const ip = clientIp(request);
    switch (route.auth) {
      case 'key':
        if (route.operatorAlso && header(request, 'authorization') === undefined && header(request, 'x-admin-token') !== undefined) {
          operatorAccess(request, route, ip);
          return;
        }
        return keyAccess(request, reply, ip);
      case 'operator':
        operatorAccess(request, route, ip);
        return;
      case 'public':
      case 'bootstrap': {
        rateLimits.takeClientIp(ip);
        rateLimits.takeGlobal();
        // Before the token check, so that guessing tokens uses up the allowance too.
        if (route.registrationLimited) rateLimits.takeRegistration(ip);
        if (route.auth === 'public') return;
        if (config.dev && config.openRegistration) return;
        if (!operatorTokens.bootstrapConfigured) throw new UnavailableError('registration unavailable: no bootstrap token is configured');
        const token = header(request, 'x-bootstrap-token');
        if (!token || !operatorTokens.isValidBootstrap(token)) throw new UnauthorizedError('invalid or missing bootstrap token');
        return;
      }
    }
  };
}

/** The authenticated tenant of a key route (the guard guarantees it; anything else is a bug). */
export function tenantOf(request: FastifyRequest): string {
  const id = request.principal?.tenantId;
  if (!id) throw new InternalError('route needs an authenticated tenant');
  return id;
}
