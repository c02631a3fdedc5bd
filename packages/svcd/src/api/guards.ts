// The access pipeline, in the order it runs for every request:
// HTTPS rule -> global limit -> registration limit -> credentials -> tenant limit.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../app.js';
import { ForbiddenError, InternalError, RateLimitedError, UnauthorizedError, UnavailableError } from '../errors.js';
import { clientIp, isLoopback } from './client-ip.js';
import type { SvcRouteConfig } from './route-config.js';

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function accessGuard(deps: Deps) {
  const { config, rateLimits, authenticator, operatorTokens, audit } = deps;
  return async function guard(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const route: SvcRouteConfig | undefined = request.routeOptions.config.svc;
    if (!route) return; // unknown route: the not-found handler answers

    // Spec 5.9: behind the local TLS-terminating proxy, plain HTTP is refused in production.
    if (!config.dev && !route.liveness && isLoopback(request.socket.remoteAddress) && header(request, 'x-forwarded-proto') !== 'https') {
      throw new ForbiddenError('HTTPS required');
    }
    if (!route.liveness) rateLimits.takeGlobal();
    // Before the token check, so that guessing tokens uses up the allowance too.
    if (route.registrationLimited) rateLimits.takeRegistration(clientIp(request));

    switch (route.auth) {
      case 'public':
        return;
      case 'bootstrap': {
        if (config.dev && config.openRegistration) return;
        if (!operatorTokens.bootstrapConfigured) throw new UnavailableError('registration unavailable: no bootstrap token is configured');
        const token = header(request, 'x-bootstrap-token');
        if (!token || !operatorTokens.isValidBootstrap(token)) throw new UnauthorizedError('invalid or missing bootstrap token');
        return;
      }
      case 'operator': {
        const used = operatorTokens.authorize({
          admin: header(request, 'x-admin-token'),
          bootstrap: header(request, 'x-bootstrap-token'),
        });
        if (used === 'bootstrap') {
          audit.warn({ audit: true, route: request.routeOptions.url }, 'bootstrap token used on an operator route (deprecated: configure SVC_ADMIN_TOKEN)');
        }
        return;
      }
      case 'key': {
        const principal = await authenticator.authenticate(header(request, 'authorization'));
        if (!principal.tenantId) throw new InternalError('authenticated request without a tenant id');
        request.principal = principal;
        const r = rateLimits.takeTenant(principal.tenantId);
        void reply.header('x-ratelimit-limit', String(rateLimits.tenantLimit));
        void reply.header('x-ratelimit-remaining', String(r.remaining));
        if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds, 'tenant');
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
