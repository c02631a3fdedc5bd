import { MetricsQuery, ServiceIdParams, TenantMetricsQuery, UsageRollupList } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function meteringRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { metering } = deps;
  return routePlugin((app) => {
    app.get(
      '/v1/tenant/usage/metrics',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary:
            "Usage rollups, oldest first: the tenant's totals over all its containers, or one service's with service_id (period hourly or daily, default daily; since/until RFC 3339; 503 when the metering store is unavailable)",
          tags: ['metering'],
          querystring: TenantMetricsQuery,
          response: { 200: UsageRollupList, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => metering.tenantMetrics(tenantOf(request), request.query),
    );

    app.get(
      '/v1/services/:serviceID/metrics',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: "One service's usage rollups, oldest first (period hourly or daily, default daily; since/until RFC 3339)",
          tags: ['metering'],
          params: ServiceIdParams,
          querystring: MetricsQuery,
          response: { 200: UsageRollupList, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => metering.serviceMetrics(tenantOf(request), request.params.serviceID, request.query),
    );
  });
}
