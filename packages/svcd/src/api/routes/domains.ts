import { CreateDomainRequest, Domain, DomainList, DomainParams, ServiceIdParams } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

/** Custom domains of a service (beyond the spec; domains/domains.ts has the rules). */
export function domainRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { domains } = deps;
  const key = { svc: { auth: 'key' as const } };
  const tags = ['domains'];
  return routePlugin((app) => {
    app.post(
      '/v1/services/:serviceID/domains',
      {
        config: key,
        schema: {
          summary:
            "Adds a custom domain (beyond the spec): 201, status pending_verification, with the TXT record that proves ownership (`verification`). svc checks for it every minute for an hour, then every 15 minutes for 7 days; once it is found the name is routed to the service (and, with --tls on, certified). 409 when the name is in use by another service (proven by its owner), added already, or the service has max_domains_per_service",
          tags,
          params: ServiceIdParams,
          body: CreateDomainRequest,
          response: { 201: Domain, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => reply.code(201).send(await domains.add(tenantOf(request), request.params.serviceID, request.body)),
    );

    app.get(
      '/v1/services/:serviceID/domains',
      { config: key, schema: { summary: "The service's custom domains, oldest first", tags, params: ServiceIdParams, response: { 200: DomainList, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => domains.list(tenantOf(request), request.params.serviceID),
    );

    app.get(
      '/v1/services/:serviceID/domains/:domainID',
      { config: key, schema: { summary: 'One custom domain, with its status and last_error', tags, params: DomainParams, response: { 200: Domain, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => domains.get(tenantOf(request), request.params.serviceID, request.params.domainID),
    );

    app.post(
      '/v1/services/:serviceID/domains/:domainID/verify',
      {
        config: key,
        schema: {
          summary: 'Checks the TXT record (and, once proven, the certificate) now instead of at the next scheduled check; answers the domain as it is after the check',
          tags,
          params: DomainParams,
          response: { 200: Domain, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => domains.verifyNow(tenantOf(request), request.params.serviceID, request.params.domainID),
    );

    app.delete(
      '/v1/services/:serviceID/domains/:domainID',
      { config: key, schema: { summary: 'Removes a custom domain: the name is no longer routed, and free for others', tags, params: DomainParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request, reply) => {
        await domains.remove(tenantOf(request), request.params.serviceID, request.params.domainID);
        return reply.code(204).send(null);
      },
    );
  });
}
