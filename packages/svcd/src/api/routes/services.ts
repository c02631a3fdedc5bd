import {
  CreateServiceQuery,
  CreateServiceRequest,
  DeploymentList,
  DeploymentParams,
  Deployment,
  EnvKeyParams,
  EnvQuery,
  EnvVars,
  LifecycleResponse,
  LOG_TAIL_DEFAULT,
  LogsQuery,
  RenameServiceRequest,
  ScaleServiceRequest,
  Service,
  ServiceGetQuery,
  ServiceIdParams,
  ServiceList,
  ServiceListQuery,
  SetEnvRequest,
  CreateSnapshotRequest,
  Snapshot,
  SnapshotIdParams,
  SnapshotList,
} from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SVCD_SESSION_CAPS, TENANT_SESSION_CAPS } from '../../sessions/session-limits.js';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { streamFollow } from '../streaming.js';
import { routePlugin } from './plugin.js';
import { WAITS_PER_SVCD, WAITS_PER_TENANT } from '../../sessions/held-waits.js';
import { answerHeldWait } from '../held-wait.js';

export function serviceRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { services } = deps;
  const key = { svc: { auth: 'key' as const } };
  return routePlugin((app) => {
    app.post(
      '/v1/services',
      {
        config: key,
        schema: {
          summary: 'Creates a service (201, status deploying; the deploy runs in the background for up to 10 minutes). With ?from_snapshot=ID the body is {name} and the snapshot gives image, port and env. With await_build: true (beyond the spec) and no image, the service is created stopped, without a deployment, and its first successful build deploys it. 409 `quota exceeded: disk` while the tenant is at its disk quota; on a swarm (--runtime swarm), 409 `every port of --swarm-ports is taken` when no published port is left for a new service',
          tags: ['services'],
          querystring: CreateServiceQuery,
          body: CreateServiceRequest,
          response: { 201: Service, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => {
        const tenant = tenantOf(request);
        const snapshot = request.query.from_snapshot;
        const created = snapshot === undefined ? await services.create(tenant, request.body) : await services.createFromSnapshot(tenant, snapshot, request.body);
        return reply.code(201).send(created);
      },
    );

    app.get(
      '/v1/services',
      {
        config: key,
        schema: { summary: 'Services, oldest first', tags: ['services'], querystring: ServiceListQuery, response: { 200: ServiceList, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => services.list(tenantOf(request), request.query.limit, request.query.offset),
    );

    app.get(
      '/v1/services/:serviceID',
      {
        config: key,
        schema: {
          summary: `One service, with url, dns_label, last_error and crash/circuit fields. With ?wait=N (beyond the spec), answered once it is no longer deploying or after N seconds; past ${WAITS_PER_TENANT} held waits of a tenant at once (on services and builds), or ${WAITS_PER_SVCD} in all, on one svcd, the answer comes at once`,
          tags: ['services'],
          params: ServiceIdParams,
          querystring: ServiceGetQuery,
          response: { 200: Service, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request, reply) => {
        const { wait } = request.query;
        if (wait === undefined) return services.get(tenantOf(request), request.params.serviceID);
        return answerHeldWait(request, reply, deps.waits, (gone) => services.getOnceDeployed(tenantOf(request), request.params.serviceID, wait * 1000, gone));
      },
    );

    app.patch(
      '/v1/services/:serviceID',
      {
        config: key,
        schema: { summary: 'Renames a service (the DNS label stays)', tags: ['services'], params: ServiceIdParams, body: RenameServiceRequest, response: { 200: Service, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } },
      },
      async (request) => services.rename(tenantOf(request), request.params.serviceID, request.body.name),
    );

    app.delete(
      '/v1/services/:serviceID',
      {
        config: key,
        schema: { summary: 'Deletes a service, its container and (when it was the last) the tenant network', tags: ['services'], params: ServiceIdParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request, reply) => {
        await services.delete(tenantOf(request), request.params.serviceID);
        return reply.code(204).send(null);
      },
    );

    for (const reason of ['start', 'restart', 'redeploy', 'reset'] as const) {
      app.post(
        `/v1/services/:serviceID/${reason}`,
        {
          config: key,
          schema: {
            summary: {
              start: 'Starts a stopped service (a new deployment)',
              restart: 'Recreates the container so env changes apply',
              redeploy: 'Pulls the image again and redeploys',
              reset: 'Clears the crash count and the circuit, and redeploys',
            }[reason],
            description:
              'Answers once the deployment is recorded. Rolling on the Docker driver: a running service keeps serving from its old container until the new one is ready and routed, then the old one is stopped (10 s grace); a deploy that fails removes both, and the service reads failed.',
            tags: ['services'],
            params: ServiceIdParams,
            response: { 202: LifecycleResponse, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
          },
        },
        async (request, reply) => reply.code(202).send(await services.deploy(tenantOf(request), request.params.serviceID, reason)),
      );
    }

    app.post(
      '/v1/services/:serviceID/scale',
      {
        config: key,
        schema: {
          summary: 'Sets how many replicas of the service run (beyond the spec)',
          description:
            "A service that is to run gets a new deployment (reason scale): in place where it runs what its last successful deployment deployed (the running replicas are left alone), else deployed anew; a stopped one keeps the count for its next start (deployment null), as does one whose crash circuit is open. Replicas above 1 need --runtime swarm (400 elsewhere); each takes one service share of the tenant's memory and CPU quota (409 `quota exceeded` past max_services). The proxy balances requests among the replicas that pass the service's health check.",
          tags: ['services'],
          params: ServiceIdParams,
          body: ScaleServiceRequest,
          response: { 202: LifecycleResponse, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => reply.code(202).send(await services.scale(tenantOf(request), request.params.serviceID, request.body.replicas)),
    );

    app.post(
      '/v1/services/:serviceID/stop',
      {
        config: key,
        schema: { summary: 'Stops a service (its container is removed; start deploys it again)', tags: ['services'], params: ServiceIdParams, response: { 200: LifecycleResponse, ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request) => services.stop(tenantOf(request), request.params.serviceID),
    );

    app.get(
      '/v1/services/:serviceID/deployments',
      {
        config: key,
        schema: { summary: 'Deployments, newest first', tags: ['services'], params: ServiceIdParams, querystring: ServiceListQuery, response: { 200: DeploymentList, ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request) => services.deployments(tenantOf(request), request.params.serviceID, request.query.limit, request.query.offset),
    );

    app.post(
      '/v1/services/:serviceID/deployments/:deploymentID/cancel',
      {
        config: key,
        schema: { summary: 'Cancels a pending or running deployment', tags: ['services'], params: DeploymentParams, response: { 200: Deployment, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } },
      },
      async (request) => services.cancelDeployment(tenantOf(request), request.params.serviceID, request.params.deploymentID),
    );

    app.get(
      '/v1/services/:serviceID/logs',
      {
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: `Container output as text/plain: tail (default 100, max 10000); follow=true streams until the client leaves or the container ends. Output reaches the log at the installation's log rate (by default 500 lines and 512 KiB a second, both streams together); what a service prints beyond it is dropped at the source and a \`[svc] N lines of output dropped\` line says how much. A tenant reads at most ${TENANT_SESSION_CAPS.logs} logs at once (409 \`quota exceeded\`), a server serves at most ${SVCD_SESSION_CAPS.logs} (503 \`server busy\`, Retry-After)`,
          tags: ['services'],
          params: ServiceIdParams,
          querystring: LogsQuery,
          response: { 200: { content: { 'text/plain': { schema: Type.String() } } }, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => {
        // The service is looked up before anything is written, so a bad id is a clean 404.
        const stream = await services.logs(tenantOf(request), request.params.serviceID, request.query.tail ?? LOG_TAIL_DEFAULT, request.query.follow === true);
        void reply.type('text/plain; charset=utf-8');
        if (!stream) return reply.send('');
        if (request.query.follow !== true) {
          // The 200 schema documents text/plain; the body is a stream of it, which the typed reply cannot express.
          return reply.send(stream as unknown as string);
        }
        streamFollow(reply, stream);
      },
    );

    app.post(
      '/v1/services/:serviceID/snapshots',
      {
        config: key,
        schema: { summary: "Saves the service's image, port and env as a snapshot; 409 `quota exceeded: maximum snapshots reached (50)` when the tenant already keeps 50", tags: ['snapshots'], params: ServiceIdParams, body: CreateSnapshotRequest, response: { 201: Snapshot, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } },
      },
      async (request, reply) => reply.code(201).send(await deps.snapshots.create(tenantOf(request), request.params.serviceID, request.body)),
    );

    app.get(
      '/v1/snapshots',
      {
        config: key,
        schema: { summary: 'Snapshots, newest first', tags: ['snapshots'], querystring: ServiceListQuery, response: { 200: SnapshotList, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => deps.snapshots.list(tenantOf(request), request.query.limit, request.query.offset),
    );

    app.get(
      '/v1/snapshots/:snapshotID',
      {
        config: key,
        schema: { summary: 'One snapshot', tags: ['snapshots'], params: SnapshotIdParams, response: { 200: Snapshot, ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request) => deps.snapshots.get(tenantOf(request), request.params.snapshotID),
    );

    app.delete(
      '/v1/snapshots/:snapshotID',
      {
        config: key,
        schema: { summary: 'Deletes a snapshot', tags: ['snapshots'], params: SnapshotIdParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request, reply) => {
        await deps.snapshots.delete(tenantOf(request), request.params.snapshotID);
        return reply.code(204).send(null);
      },
    );

    app.get(
      '/v1/services/:serviceID/env',
      {
        config: key,
        schema: { summary: 'Environment variables, masked unless reveal=true (audit-logged)', tags: ['services'], params: ServiceIdParams, querystring: EnvQuery, response: { 200: EnvVars, ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request) => services.env(tenantOf(request), request.params.serviceID, request.query.reveal === true),
    );

    app.post(
      '/v1/services/:serviceID/env',
      {
        config: key,
        schema: { summary: 'Sets variables (merged; applied on restart); answers the masked set', tags: ['services'], params: ServiceIdParams, body: SetEnvRequest, response: { 200: EnvVars, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } },
      },
      async (request) => services.setEnv(tenantOf(request), request.params.serviceID, request.body),
    );

    app.delete(
      '/v1/services/:serviceID/env/:key',
      {
        config: key,
        schema: { summary: 'Removes a variable (applied on restart)', tags: ['services'], params: EnvKeyParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } },
      },
      async (request, reply) => {
        await services.unsetEnv(tenantOf(request), request.params.serviceID, request.params.key);
        return reply.code(204).send(null);
      },
    );
  });
}
