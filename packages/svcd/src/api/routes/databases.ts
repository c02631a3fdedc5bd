import { ConnectionString, CreateDatabaseRequest, DatabaseIdParams, DatabaseList, DatabaseListQuery, DatabaseRecord } from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function databaseRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { databases } = deps;
  const key = { svc: { auth: 'key' as const } };
  return routePlugin((app) => {
    app.post(
      '/v1/databases',
      {
        // No request timeout (spec 8): creating may include pulling the operator's image.
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: "Creates a postgres or redis database (201, status provisioning until a real login succeeds); 409 at the tenant's max_databases or its disk quota (`quota exceeded: disk`)",
          tags: ['databases'],
          body: CreateDatabaseRequest,
          response: { 201: DatabaseRecord, ...errors(...KEY_ROUTE_ERRORS, 409) },
        },
      },
      async (request, reply) => reply.code(201).send(await databases.create(tenantOf(request), request.body)),
    );

    app.get(
      '/v1/databases',
      { config: key, schema: { summary: 'Databases, oldest first (never their passwords)', tags: ['databases'], querystring: DatabaseListQuery, response: { 200: DatabaseList, ...errors(...KEY_ROUTE_ERRORS) } } },
      async (request) => databases.list(tenantOf(request), request.query.limit, request.query.offset),
    );

    app.get(
      '/v1/databases/:dbID',
      { config: key, schema: { summary: 'One database', tags: ['databases'], params: DatabaseIdParams, response: { 200: DatabaseRecord, ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request) => databases.get(tenantOf(request), request.params.dbID),
    );

    app.get(
      '/v1/databases/:dbID/connection-string',
      {
        config: key,
        schema: {
          summary: "Reveals the credentials (audit-logged): a connection string for svc's host (loopback port) and one for the tenant's services (its host name); a database stopped by a suspension starts again",
          tags: ['databases'],
          params: DatabaseIdParams,
          response: { 200: ConnectionString, ...errors(...KEY_ROUTE_ERRORS, 404) },
        },
      },
      async (request) => databases.connectionString(tenantOf(request), request.params.dbID),
    );

    app.delete(
      '/v1/databases/:dbID',
      { config: key, schema: { summary: 'Deletes the database: its container and its volume with the data', tags: ['databases'], params: DatabaseIdParams, response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 404) } } },
      async (request, reply) => {
        await databases.delete(tenantOf(request), request.params.dbID);
        return reply.code(204).send(null);
      },
    );
  });
}
