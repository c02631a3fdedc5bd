import { HealthBody, HealthDetail, HealthDetailQuery, ValidateTokenRequest, ValidateTokenResponse } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Deps } from '../../app.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function systemRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  return routePlugin((app) => {
    app.get(
      '/v1/system/health',
      {
        config: { svc: { auth: 'public', liveness: true } },
        schema: { summary: 'Liveness; never touches the store', tags: ['system'], response: { 200: HealthBody } },
      },
      () => ({ status: 'ok' as const }),
    );

    app.get(
      '/v1/system/health/detailed',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: 'Store, engine, sandbox, disks and networks; cached 30 s unless fresh=true',
          tags: ['system'],
          querystring: HealthDetailQuery,
          response: { 200: HealthDetail, ...errors(...KEY_ROUTE_ERRORS) },
        },
      },
      async (request) => deps.health.detail(request.query.fresh === true),
    );

    app.post(
      '/v1/system/bootstrap-token/validate',
      {
        config: { svc: { auth: 'public', registrationLimited: true } },
        schema: {
          summary: 'Checks a bootstrap token given in the body; 200 {valid} whatever the answer',
          tags: ['system'],
          body: ValidateTokenRequest,
          response: { 200: ValidateTokenResponse, ...errors(400, 429) },
        },
      },
      (request) => ({ valid: deps.operatorTokens.isValidBootstrap(request.body.token) }),
    );
  });
}
