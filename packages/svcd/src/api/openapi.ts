// The OpenAPI 3.1 document, generated from the same TypeBox schemas that validate requests, and
// served at GET /v1/openapi.json. Each operation's security follows its route config.
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { ErrorBody } from '@svc/contract';
import type { SvcRouteConfig } from './route-config.js';
import { isIdempotencyCandidate } from './idempotency.js';

const SECURITY: Record<SvcRouteConfig['auth'], Array<Record<string, string[]>>> = {
  public: [],
  key: [{ apiKey: [] }],
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
          'Errors are always {error: string}; the HTTP status carries the class.',
          'Authenticated answers carry X-RateLimit-Limit and X-RateLimit-Remaining; 429 adds Retry-After.',
          'Mutating key routes accept Idempotency-Key (replayed for 10 minutes; Idempotent-Replayed: true on replays).',
          'Request bodies are read as JSON whatever the Content-Type. Lists are JSON arrays.',
          'Choices beyond the specification are listed in the README (Decisions).',
        ].join('\n'),
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: '<keyID>.<secret>' },
          bootstrapToken: { type: 'apiKey', in: 'header', name: 'X-Bootstrap-Token' },
          adminToken: { type: 'apiKey', in: 'header', name: 'X-Admin-Token' },
        },
      },
    },
    transform: ({ schema, url, route }) => {
      const svc = route.config?.svc as SvcRouteConfig | undefined;
      const transformed = { ...(schema as Record<string, unknown>) };
      if (svc) {
        transformed.security = SECURITY[svc.auth];
        const methods = (Array.isArray(route.method) ? route.method : [route.method]).map((m) => m.toUpperCase());
        transformed.response = { ...pipelineErrors(svc, methods), ...(transformed.response as Record<string, unknown> | undefined) };
      }
      return { schema: transformed as typeof schema, url };
    },
  });
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
    async () => app.swagger(),
  );
}
