import { ActivityList, ActivityQuery } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function activityRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  return routePlugin((app) => {
    app.get(
      '/v1/activity',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: "The tenant's activity feed, newest first (limit default 50, max 200; since in unix seconds)",
          tags: ['activity'],
          querystring: ActivityQuery,
          response: { 200: ActivityList, ...errors(...KEY_ROUTE_ERRORS) },
        },
      },
      async (request) => deps.activity.list(tenantOf(request), request.query),
    );
  });
}
