import { ClusterNode, ClusterNodeList, ClusterNodeParams, HealthBody, HealthDetail, HealthDetailQuery, ValidateTokenRequest, ValidateTokenResponse } from '@svc/contract';
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
        config: { svc: { auth: 'key', operatorAlso: true } },
        schema: {
          summary: 'Store, engine, sandbox, disks and networks; cached 30 s unless fresh=true',
          tags: ['system'],
          querystring: HealthDetailQuery,
          response: { 200: HealthDetail, ...errors(...KEY_ROUTE_ERRORS) },
        },
      },
      async (request) => deps.health.detail(request.query.fresh === true),
    );

    app.get(
      '/v1/system/nodes',
      {
        config: { svc: { auth: 'operator', registrationLimited: true } },
        schema: {
          summary: "Operator: the cluster's nodes (--runtime swarm) with their state, availability and svc's tasks; 409 on one engine",
          tags: ['operator'],
          response: { 200: ClusterNodeList, ...errors(401, 403, 409, 429, 503) },
        },
      },
      () => deps.cluster.list(),
    );

    for (const [action, availability] of [
      ['drain', 'drain'],
      ['activate', 'active'],
    ] as const) {
      app.post(
        `/v1/system/nodes/:node/${action}`,
        {
          config: { svc: { auth: 'operator', registrationLimited: true } },
          schema: {
            summary:
              action === 'drain'
                ? 'Operator: drains a node: Swarm moves its tasks to the other nodes and gives it no new ones (maintenance)'
                : 'Operator: makes a drained node take tasks again',
            tags: ['operator'],
            params: ClusterNodeParams,
            response: { 200: ClusterNode, ...errors(400, 401, 403, 404, 409, 429, 503) },
          },
        },
        (request) => deps.cluster.setAvailability(request.params.node, availability),
      );
    }

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
