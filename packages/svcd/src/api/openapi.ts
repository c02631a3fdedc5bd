// The OpenAPI 3.1 document, generated from the same TypeBox schemas that validate requests, and
// served at GET /v1/openapi.json. Each operation's security follows its route config.
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import type { SvcRouteConfig } from './route-config.js';

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
      if (svc) transformed.security = SECURITY[svc.auth];
      return { schema: transformed as typeof schema, url };
    },
  });
}

/** The document route itself; registered after the others so that it sees them all. */
export function openApiRoute(app: FastifyInstance): void {
  app.get(
    '/v1/openapi.json',
    { config: { svc: { auth: 'public' } }, schema: { hide: true } },
    async () => app.swagger(),
  );
}
