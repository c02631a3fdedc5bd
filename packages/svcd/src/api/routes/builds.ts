import {
  Build,
  BuildGetQuery,
  BuildList,
  BuildListQuery,
  BuildLogsQuery,
  BuildParams,
  CancelBuildResponse,
  CreateBuildRequest,
  CreateBuildResponse,
  ServiceIdParams,
  TenantBuildsQuery,
} from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { WAITS_PER_SVCD, WAITS_PER_TENANT } from '../../sessions/held-waits.js';
import { TENANT_SESSION_CAPS } from '../../sessions/session-limits.js';
import { answerHeldWait } from '../held-wait.js';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { streamFollow } from '../streaming.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function buildRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { builds } = deps;
  const key = { svc: { auth: 'key' as const } };
  return routePlugin((app) => {
    app.post(
      '/v1/services/:serviceID/builds',
      {
        config: key,
        schema: {
          summary: "Queues a build of the service from a git source (202). On success the service is redeployed with the built image; 409 when the tenant's build queue is full",
          tags: ['builds'],
          params: ServiceIdParams,
          body: CreateBuildRequest,
          response: { 202: CreateBuildResponse, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => reply.code(202).send(await builds.create(tenantOf(request), request.params.serviceID, request.body)),
    );

    app.get(
      '/v1/services/:serviceID/builds',
      {
        config: key,
        schema: { summary: "The service's builds, newest first", tags: ['builds'], params: ServiceIdParams, querystring: BuildListQuery, response: { 200: BuildList, ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request) => builds.list(tenantOf(request), request.params.serviceID, request.query.limit, request.query.offset),
    );

    app.get(
      '/v1/builds',
      {
        config: key,
        schema: { summary: "The tenant's builds across services, newest first", tags: ['builds'], querystring: TenantBuildsQuery, response: { 200: BuildList, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => builds.listForTenant(tenantOf(request), request.query.limit),
    );

    app.get(
      '/v1/services/:serviceID/builds/:buildID',
      {
        config: key,
        schema: {
          summary: `One build. With ?wait=N (beyond the spec), answered once it has ended (succeeded, failed or cancelled) or after N seconds; past ${WAITS_PER_TENANT} held waits of a tenant at once (on services and builds), or ${WAITS_PER_SVCD} in all, on one svcd, the answer comes at once`,
          tags: ['builds'],
          params: BuildParams,
          querystring: BuildGetQuery,
          response: { 200: Build, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request, reply) => {
        const { serviceID, buildID } = request.params;
        const { wait } = request.query;
        if (wait === undefined) return builds.get(tenantOf(request), serviceID, buildID);
        return answerHeldWait(request, reply, deps.waits, (gone) => builds.getOnceFinished(tenantOf(request), serviceID, buildID, wait * 1000, gone));
      },
    );

    app.get(
      '/v1/services/:serviceID/builds/:buildID/logs',
      {
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: `Clone and build output as text/plain (the last 5 MB); follow=true streams until the build ends (a followed log counts against the tenant's ${TENANT_SESSION_CAPS.logs} log streams at once: 409 \`quota exceeded\`). Logs of builds finished more than --build-log-retention-days ago (default 30), or older than the service\'s newest 50 builds, are pruned: the answer is then a one-line note saying so`,
          tags: ['builds'],
          params: BuildParams,
          querystring: BuildLogsQuery,
          response: { 200: { content: { 'text/plain': { schema: Type.String() } } }, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => {
        // The build is looked up before anything is written, so a bad id is a clean 404.
        const follow = request.query.follow === true;
        const stream = await builds.logs(tenantOf(request), request.params.serviceID, request.params.buildID, follow);
        void reply.type('text/plain; charset=utf-8');
        if (!follow) return reply.send(stream as unknown as string);
        streamFollow(reply, stream);
      },
    );

    app.delete(
      '/v1/services/:serviceID/builds/:buildID',
      {
        config: key,
        schema: { summary: 'Cancels a queued or running build at once; 409 when it has finished', tags: ['builds'], params: BuildParams, response: { 200: CancelBuildResponse, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } },
      },
      async (request) => builds.cancel(tenantOf(request), request.params.serviceID, request.params.buildID),
    );
  });
}
