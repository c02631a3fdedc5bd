import {
  CreateEnvironmentRequest,
  CreatePreviewRequest,
  Environment,
  EnvironmentList,
  EnvironmentListQuery,
  EnvironmentParams,
  EXEC_ID_HEADER,
  ExecEvent,
  ExecParams,
  ExecRequest,
  ExecResult,
  ExecSignalRequest,
  ExecSignalResult,
  LeaseRequest,
  Preview,
  PreviewList,
  PreviewParams,
  SyncRequest,
  SyncResult,
  Template,
  TemplateList,
  TemplateParams,
} from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SVCD_SESSION_CAPS, TENANT_SESSION_CAPS } from '../../sessions/session-limits.js';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';
import { streamFollow } from '../streaming.js';

export function environmentRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { environments } = deps;
  const key = { svc: { auth: 'key' as const } };
  // Spec 8: no request timeout on create, sync and exec.
  const long = { svc: { auth: 'key' as const, longRunning: true } };
  const tags = ['environments'];
  return routePlugin((app) => {
    app.get(
      '/v1/environments/templates',
      { config: key, schema: { summary: 'Environment templates: default (Ubuntu 24.04), node, python, go', tags, response: { 200: TemplateList, ...errors(...KEY_ROUTE_ERRORS) } } },
      () => environments.templates(),
    );
    app.get(
      '/v1/environments/templates/:templateID',
      { config: key, schema: { summary: 'One template', tags, params: TemplateParams, response: { 200: Template, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      (request) => environments.template(request.params.templateID),
    );

    app.post(
      '/v1/environments',
      {
        config: long,
        schema: {
          summary: "Creates an environment and answers once it runs (201, status running); 400 for an unknown template, 409 for a taken name, at the tenant's max_environments, or at its disk quota (\`quota exceeded: disk\`)",
          tags,
          body: CreateEnvironmentRequest,
          response: { 201: Environment, ...errors(...KEY_ROUTE_ERRORS, 409, 503) },
        },
      },
      async (request, reply) => reply.code(201).send(await environments.create(tenantOf(request), request.body)),
    );
    app.get(
      '/v1/environments',
      { config: key, schema: { summary: 'Environments, oldest first', tags, querystring: EnvironmentListQuery, response: { 200: EnvironmentList, ...errors(...KEY_ROUTE_ERRORS) } } },
      async (request) => environments.list(tenantOf(request), request.query.limit, request.query.offset),
    );
    app.get(
      '/v1/environments/:envID',
      { config: key, schema: { summary: 'One environment', tags, params: EnvironmentParams, response: { 200: Environment, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => environments.get(tenantOf(request), request.params.envID),
    );
    app.delete(
      '/v1/environments/:envID',
      { config: key, schema: { summary: 'Deletes the environment with its workspace and previews', tags, params: EnvironmentParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request, reply) => {
        await environments.delete(tenantOf(request), request.params.envID);
        return reply.code(204).send(null);
      },
    );
    app.post(
      '/v1/environments/:envID/start',
      { config: key, schema: { summary: 'Starts a stopped environment (status running); 409 when its lease has ended', tags, params: EnvironmentParams, response: { 200: Environment, ...errors(...KEY_ROUTE_ERRORS, 404, 409) } } },
      async (request) => environments.start(tenantOf(request), request.params.envID),
    );
    app.post(
      '/v1/environments/:envID/stop',
      { config: key, schema: { summary: 'Stops the environment (status stopped); the workspace stays', tags, params: EnvironmentParams, response: { 200: Environment, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => environments.stop(tenantOf(request), request.params.envID),
    );
    app.post(
      '/v1/environments/:envID/lease',
      {
        config: key,
        schema: {
          summary: 'Sets the lease to run duration_seconds from now; an expired environment becomes stopped again (start it)',
          tags,
          params: EnvironmentParams,
          body: LeaseRequest,
          response: { 200: Environment, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => environments.lease(tenantOf(request), request.params.envID, request.body.duration_seconds),
    );
    app.post(
      '/v1/environments/:envID/exec',
      {
        // Never replayed: a command is run each time it is asked for (spec 8).
        config: { svc: { auth: 'key', longRunning: true, noIdempotency: true } },
        schema: {
          summary: `Runs a command (argv, no shell) in the running environment; killed at timeout (default 60 s, at most 300 s); stdout and stderr each capped at 1 MiB. A tenant runs at most ${TENANT_SESSION_CAPS.exec} at once (409 \`quota exceeded\`), a server ${SVCD_SESSION_CAPS.exec} (503 \`server busy\`). Beyond the spec: \`env\`, \`stdin\`, and \`stream: true\`, which answers application/x-ndjson, one ExecEvent per line as the output comes (an environment whose agent does not answer runs the command through the engine, and its output comes at the end)`,
          tags,
          params: EnvironmentParams,
          body: ExecRequest,
          response: {
            200: {
              description: `the outcome (application/json), or with \`stream: true\` the events; a streamed answer run through the agent names its command in \`${EXEC_ID_HEADER}\` (the signal route's exec_id)`,
              content: { 'application/json': { schema: ExecResult }, 'application/x-ndjson': { schema: ExecEvent } },
            },
            ...errors(...KEY_ROUTE_ERRORS, 404, 409),
          },
        },
      },
      async (request, reply) => {
        const { envID } = request.params;
        if (request.body.stream !== true) return reply.type('application/json').send(await environments.exec(tenantOf(request), envID, request.body));
        // Everything that can refuse the command (a stopped environment, a work_dir, the slots) does so before the 200.
        const { events, execId } = await environments.execStream(tenantOf(request), envID, request.body);
        if (execId) void reply.header(EXEC_ID_HEADER, execId);
        void reply.type('application/x-ndjson');
        streamFollow(reply, events);
      },
    );
    app.post(
      '/v1/environments/:envID/exec/:execID/signal',
      {
        // A signal is sent each time it is asked for; a retry of one that arrived finds the
        // command ended (404) or signals it again, as kill(1) would.
        config: { svc: { auth: 'key', noIdempotency: true } },
        schema: {
          summary: `Sends a signal to a streamed exec that still runs, by the id its answer's \`${EXEC_ID_HEADER}\` header gave (beyond the spec): to the command's process group, as a terminal's ^C does. 404 when no command runs under the id (it ended, or ran through the engine, whose answers carry no id); 409 when the environment is not running or its agent predates signals; 503 when the agent does not answer or failed. Never replayed: a retry signals again, as kill(1) would`,
          tags,
          params: ExecParams,
          body: ExecSignalRequest,
          response: { 200: ExecSignalResult, ...errors(...KEY_ROUTE_ERRORS, 404, 409, 503) },
        },
      },
      async (request) => environments.signalExec(tenantOf(request), request.params.envID, request.params.execID, request.body.signal),
    );
    app.post(
      '/v1/environments/:envID/sync',
      {
        config: long,
        schema: {
          summary: `Clones git_url at git_ref into /workspace/<repository name>, replacing what was there; 422 with git's message when the clone fails. A tenant runs at most ${TENANT_SESSION_CAPS.sync} syncs at once (409 \`quota exceeded\`); 503 \`server busy\` when the server's clone budget (--scratch-budget-gb) is taken`,
          tags,
          params: EnvironmentParams,
          body: SyncRequest,
          response: { 200: SyncResult, ...errors(...KEY_ROUTE_ERRORS, 404, 409, 422) },
        },
      },
      async (request) => environments.sync(tenantOf(request), request.params.envID, request.body),
    );
    app.post(
      '/v1/environments/:envID/previews',
      {
        config: key,
        schema: {
          summary: "A URL through svc's proxy to a port of the environment (201); it answers 503 while the environment does not run",
          tags,
          params: EnvironmentParams,
          body: CreatePreviewRequest,
          response: { 201: Preview, ...errors(...KEY_ROUTE_ERRORS, 404, 409) },
        },
      },
      async (request, reply) => reply.code(201).send(await environments.createPreview(tenantOf(request), request.params.envID, request.body)),
    );
    app.get(
      '/v1/environments/:envID/previews',
      { config: key, schema: { summary: "The environment's previews", tags, params: EnvironmentParams, response: { 200: PreviewList, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => environments.previews(tenantOf(request), request.params.envID),
    );
    app.delete(
      '/v1/environments/:envID/previews/:previewID',
      { config: key, schema: { summary: 'Deletes a preview', tags, params: PreviewParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request, reply) => {
        await environments.deletePreview(tenantOf(request), request.params.envID, request.params.previewID);
        return reply.code(204).send(null);
      },
    );
  });
}
