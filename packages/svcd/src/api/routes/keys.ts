import { CreateKeyRequest, CreatedKey, KeyIdParams, KeyList, RecoverRequest, RecoverResponse, RevokedKey } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function keyRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { apiKeys } = deps;
  return routePlugin((app) => {
    app.post(
      '/v1/auth/keys',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: 'Creates an API key; the secret is in api_key and is never shown again',
          tags: ['keys'],
          body: CreateKeyRequest,
          response: { 201: CreatedKey, ...errors(...KEY_ROUTE_ERRORS, 409) },
        },
      },
      async (request, reply) =>
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the client's body: only the schema check before this rules out none at all
        reply.code(201).send(await apiKeys.create(tenantOf(request), request.body?.name, request.body?.expires_in)),
    );

    app.get(
      '/v1/auth/keys',
      {
        config: { svc: { auth: 'key' } },
        schema: { summary: 'Non-revoked keys, without secrets', tags: ['keys'], response: { 200: KeyList, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => apiKeys.list(tenantOf(request)),
    );

    app.delete(
      '/v1/auth/keys/:keyID',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: 'Revokes a key (other svcd processes may honour it for up to 30 s more)',
          tags: ['keys'],
          params: KeyIdParams,
          response: { 200: RevokedKey, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => {
        await apiKeys.revoke(tenantOf(request), request.params.keyID);
        return { id: request.params.keyID, status: 'revoked' as const };
      },
    );

    app.post(
      '/v1/auth/recover',
      {
        config: { svc: { auth: 'operator', registrationLimited: true } },
        schema: {
          summary: 'Operator: issues a new key to the tenant with this email',
          tags: ['operator'],
          body: RecoverRequest,
          response: { 200: RecoverResponse, ...errors(400, 401, 403, 404, 409, 429) },
        },
      },
      async (request) => apiKeys.recover(request.body.email),
    );
  });
}
