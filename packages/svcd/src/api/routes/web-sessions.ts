import { CreateSessionRequest, EndedSession, WebSession } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Deps } from '../../app.js';
import type { SessionPrincipal } from '../../auth/web-sessions.js';
import { ForbiddenError, NotFoundError, ValidationError } from '../../errors.js';
import { crossOriginRefusal } from '../origin.js';
import { clearedSessionCookie, sessionSetCookie } from '../session-cookie.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

/** The request's session; a request authenticated by an API key has none. */
function sessionOf(request: FastifyRequest): SessionPrincipal {
  if (!request.webSession) throw new NotFoundError('session (this request was authenticated by an API key, not a session cookie)');
  return request.webSession;
}

/** Dashboard sign-in (beyond the spec; auth/web-sessions.ts). Answers are never cached. */
export function webSessionRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { webSessions } = deps;
  const secure = !deps.config.dev;
  return routePlugin((app) => {
    app.post(
      '/v1/auth/session',
      {
        config: { svc: { auth: 'public', noIdempotency: true } },
        schema: {
          summary: 'Exchanges an API key for a dashboard session: an HttpOnly, SameSite=Strict cookie (Secure outside --dev)',
          description: 'Requests authenticated by the cookie alone must send csrf_token as X-CSRF-Token when they change something.',
          tags: ['keys'],
          body: CreateSessionRequest,
          response: { 201: WebSession, ...errors(400, 401, 403, 429) },
        },
      },
      async (request, reply) => {
        // Login CSRF: another page (a tenant's app on a sibling host included) must not sign a
        // visitor into its own tenant. A browser sends Origin and Sec-Fetch-Site on this POST,
        // and only a script of the page's own origin can send JSON (a form cannot; a
        // cross-origin script is stopped by the preflight, which svcd never grants).
        const refusal = crossOriginRefusal(request);
        if (refusal !== null) throw new ForbiddenError(refusal);
        if (!/^application\/json\b/i.test(request.headers['content-type'] ?? '')) throw new ValidationError('sign-in takes Content-Type: application/json');
        const { cookie, session } = await webSessions.signIn(request.body.api_key);
        return reply.code(201).header('cache-control', 'no-store').header('set-cookie', sessionSetCookie(cookie, session.expires_at, secure)).send(session);
      },
    );

    app.get(
      '/v1/auth/session',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: "The cookie's session and its CSRF token (404 when the request came with an API key)",
          tags: ['keys'],
          response: { 200: WebSession, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request, reply) => reply.header('cache-control', 'no-store').send(webSessions.view(sessionOf(request))),
    );

    app.delete(
      '/v1/auth/session',
      {
        config: { svc: { auth: 'key', noIdempotency: true } },
        schema: {
          summary: "Signs out: the cookie's session ends on every svcd at once",
          tags: ['keys'],
          response: { 200: EndedSession, ...errors(...KEY_ROUTE_ERRORS, 403, 404) },
        },
      },
      async (request, reply) => {
        await webSessions.signOut(sessionOf(request));
        return reply.header('set-cookie', clearedSessionCookie(secure)).send({ status: 'signed_out' as const });
      },
    );
  });
}
