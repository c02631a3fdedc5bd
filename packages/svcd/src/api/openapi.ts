// The OpenAPI 3.1 document, generated from the same TypeBox schemas that validate requests, and
// served at GET /v1/openapi.json. Each operation's security follows its route config.
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { ErrorBody, QUERY_COUNT_MAX, QUERY_UNIX_SECONDS_MAX, SESSION_COOKIE } from '@svc/contract';
import { CLIENT_IP_BUCKETS_MAX, CLIENT_IP_BURST, CLIENT_IP_PER_SECOND } from '../ratelimit/index.js';
import type { SvcRouteConfig } from './route-config.js';
import { isIdempotencyCandidate } from './idempotency.js';
import { OPERATION_IDS } from './operation-ids.js';

const SECURITY: Record<SvcRouteConfig['auth'], Array<Record<string, string[]>>> = {
  public: [],
  // Or the dashboard's session cookie (with X-CSRF-Token on requests that change something).
  key: [{ apiKey: [] }, { sessionCookie: [] }],
  bootstrap: [{ bootstrapToken: [] }],
  operator: [{ adminToken: [] }, { bootstrapToken: [] }],
};

export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'svc API',
        version: '1',
        description: [
          'A self-hosted, multi-tenant container hosting platform. All routes live under /v1/.',
          'Errors are always {error: string, request_id: string}; the HTTP status carries the class.',
          'Every answer carries X-Request-Id, an id svcd generates (a client-sent X-Request-Id of up to 64 characters A-Z a-z 0-9 . _ : - is logged beside it, never used instead);',
          'error bodies repeat it as request_id, and the svcd log lines of the request carry it as reqId. 5xx bodies name the failing part only; the detail is in that log.',
          'Authenticated answers carry X-RateLimit-Limit and X-RateLimit-Remaining; 429 adds Retry-After.',
          `Requests without a valid credential are limited per client IP (${CLIENT_IP_PER_SECOND}/s, burst ${CLIENT_IP_BURST}; ${CLIENT_IP_BUCKETS_MAX} addresses tracked) before the global limit;`,
          'failed API keys and operator tokens count against it, requests with a valid API key do not. A valid operator token is not charged to the registration limiter.',
          `Numeric query parameters are bounded: limit and offset at most ${QUERY_COUNT_MAX} (limits above 200 are clamped to 200), since at most ${QUERY_UNIX_SECONDS_MAX}; beyond is 400.`,
          'Mutating key routes accept Idempotency-Key (replayed for 10 minutes; Idempotent-Replayed: true on replays).',
          'Request bodies are read as JSON whatever the Content-Type. Lists are JSON arrays.',
          "Under CPU contention a tenant's workloads get an equal share with every other busy tenant's (environments taken from the shared warm pool share the pool's; one kept for its tenant is in the tenant's), and all tenants come after svcd and the engine (a weight, not a cap: an idle machine is theirs up to the quota; README, Resource safety).",
          'Choices beyond the specification are listed in the README (Decisions).',
        ].join('\n'),
      },
      // Relative: the svcd that serves the document (paths start with /v1/); a client is given its address.
      servers: [{ url: '/', description: 'the svcd serving this document' }],
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: '<keyID>.<secret>' },
          bootstrapToken: { type: 'apiKey', in: 'header', name: 'X-Bootstrap-Token' },
          adminToken: { type: 'apiKey', in: 'header', name: 'X-Admin-Token' },
          sessionCookie: {
            type: 'apiKey',
            in: 'cookie',
            name: SESSION_COOKIE,
            description: 'a dashboard session (POST /v1/auth/session); requests that change something also send its csrf_token as X-CSRF-Token',
          },
        },
      },
    },
    transform: ({ schema, url, route }) => {
      const svc = route.config?.svc;
      const transformed = { ...(schema as Record<string, unknown>) };
      const methods = (Array.isArray(route.method) ? route.method : [route.method]).map((m) => m.toUpperCase());
      if (!transformed.hide && methods.length === 1) transformed.operationId = operationId(methods[0] ?? '', url);
      if (svc) {
        transformed.security = svc.operatorAlso ? [...SECURITY[svc.auth], ...SECURITY.operator] : SECURITY[svc.auth];
        transformed.response = { ...pipelineErrors(svc, methods), ...(transformed.response as Record<string, unknown> | undefined) };
      }
      return { schema: transformed, url };
    },
  });
}

/** The route's operationId (operation-ids.ts); a route without one stops the document being made. */
function operationId(method: string, url: string): string {
  const key = `${method} ${url.replace(/:([A-Za-z]+)/g, '{$1}')}`;
  const id = OPERATION_IDS[key];
  if (id === undefined) throw new Error(`no operationId for ${key}: add one to api/operation-ids.ts`);
  return id;
}

/**
 * The errors the access pipeline and the server itself can give on a route, whatever the route
 * does: the document lists them too, so that a client knows every status it may see.
 */
function pipelineErrors(svc: SvcRouteConfig, methods: string[]): Record<number, typeof ErrorBody> {
  const statuses = new Set<number>();
  if (!svc.liveness) {
    statuses.add(403); // production: plain HTTP on loopback (behind the TLS proxy) is refused
    statuses.add(429); // the global limit
    statuses.add(503); // request timeout, shutting down
  }
  if (methods.some((m) => m === 'POST' || m === 'PATCH' || m === 'PUT')) {
    statuses.add(400); // malformed JSON
    statuses.add(413); // body over 1 MB
  }
  if (svc.auth !== 'public') statuses.add(401);
  if (svc.auth === 'key' || svc.registrationLimited) statuses.add(429);
  if (isIdempotencyCandidate(svc, methods)) statuses.add(409); // Idempotency-Key reused with another request
  return Object.fromEntries([...statuses].map((st) => [st, ErrorBody]));
}

/** The document route itself; registered after the others so that it sees them all. */
export function openApiRoute(app: FastifyInstance): void {
  app.get(
    '/v1/openapi.json',
    { config: { svc: { auth: 'public' } }, schema: { hide: true } },
    () => app.swagger(),
  );
}
