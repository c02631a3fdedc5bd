import { KanbanAdminToken, KanbanBoard } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function kanbanRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { kanban } = deps;
  const key = { svc: { auth: 'key' as const } };
  return routePlugin((app) => {
    app.post(
      '/v1/kanban',
      {
        // No request timeout (spec 8), though it answers at once: the board is made in the background.
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: "Creates the tenant's task board (202, status provisioning; poll GET /v1/kanban until url is set); 409 when the tenant has one",
          tags: ['kanban'],
          response: { 202: KanbanBoard, ...errors(...KEY_ROUTE_ERRORS, 409) },
        },
      },
      async (request, reply) => reply.code(202).send(await kanban.create(tenantOf(request))),
    );

    app.get(
      '/v1/kanban',
      { config: key, schema: { summary: "The tenant's task board; url is empty until it runs", tags: ['kanban'], response: { 200: KanbanBoard, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => kanban.get(tenantOf(request)),
    );

    app.get(
      '/v1/kanban/admin-token',
      {
        config: key,
        schema: {
          summary: "Reveals the board's admin token (audit-logged); a board stopped by a suspension starts again",
          tags: ['kanban'],
          response: { 200: KanbanAdminToken, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => kanban.adminToken(tenantOf(request)),
    );

    app.delete(
      '/v1/kanban',
      { config: key, schema: { summary: 'Deletes the board: its container and its volume with the data; its port is free again', tags: ['kanban'], response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request, reply) => {
        await kanban.delete(tenantOf(request));
        return reply.code(204).send(null);
      },
    );
  });
}
