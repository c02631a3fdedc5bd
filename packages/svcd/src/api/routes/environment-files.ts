// The files API of environments (beyond the spec): environments/files.ts holds the rules.
import { EnvironmentParams, FileDeleteQuery, FileInfo, FileList, FileQuery, FileWriteQuery, FILE_MAX_BYTES } from '@svc/contract';
import type { Readable } from 'node:stream';
import { Type } from 'typebox';
import type { Deps } from '../../app.js';
import { TENANT_SESSION_CAPS } from '../../sessions/session-limits.js';
import { tenantOf } from '../guards.js';
import { UPLOAD_READ_TIMEOUT_MS } from '../timeouts.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

const CAP = `${FILE_MAX_BYTES / (1024 * 1024)} MiB`;
const SHARED = `Through the environment's agent (503 when it does not answer), in one of the tenant's ${TENANT_SESSION_CAPS.exec} exec slots (409 \`quota exceeded\`); path is absolute or relative to /workspace`;

export function environmentFileRoutes(deps: Deps): FastifyPluginAsyncTypeboxOf {
  const { environmentFiles: files } = deps;
  const key = { svc: { auth: 'key' as const } };
  const tags = ['environments'];
  return routePlugin((app) => {
    // An upload is the file's bytes, not JSON: in this plugin (Fastify scopes parsers to it) a
    // body of any type reaches the route as the request's stream, read with backpressure and
    // capped by the domain, within ten minutes (not the 10 s read timeout of other routes).
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

    app.get(
      '/v1/environments/:envID/files',
      {
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: `A regular file's content (application/octet-stream, at most ${CAP}: 413 past it; 400 for a directory or a device). ${SHARED}`,
          tags,
          params: EnvironmentParams,
          querystring: FileQuery,
          response: { 200: { content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) } } }, ...errors(...KEY_ROUTE_ERRORS, 403, 404, 409, 413) },
        },
      },
      async (request, reply) => {
        const { size, content } = await files.read(tenantOf(request), request.params.envID, request.query.path);
        void reply.type('application/octet-stream').header('content-length', String(size)).header('x-content-type-options', 'nosniff');
        // The 200 schema documents bytes; the body is a stream of them, which the typed reply cannot express.
        return reply.send(content as unknown as string);
      },
    );
    app.put(
      '/v1/environments/:envID/files',
      {
        // The body is not kept, so a replay could not tell two uploads apart: never replayed (a PUT is idempotent anyway).
        config: { svc: { auth: 'key', longRunning: true, noIdempotency: true, bodyReadMs: UPLOAD_READ_TIMEOUT_MS } },
        schema: {
          summary: `Writes the request body (any content type) to the file whole: missing directories are created, the file appears once complete (an upload cut midway leaves the old one), at most ${CAP} (413), arriving within ${UPLOAD_READ_TIMEOUT_MS / 60_000} minutes (other routes: 10 s). ${SHARED}`,
          tags,
          params: EnvironmentParams,
          querystring: FileWriteQuery,
          response: { 200: FileInfo, ...errors(...KEY_ROUTE_ERRORS, 403, 404, 409, 413) },
        },
      },
      async (request) => {
        const declared = request.headers['content-length'] === undefined ? undefined : Number(request.headers['content-length']);
        // No body at all (no Content-Length, no chunks) is an empty file.
        const body = (request.body as Readable | undefined) ?? request.raw;
        return files.write(tenantOf(request), request.params.envID, request.query.path, request.query.mode, body, declared);
      },
    );
    app.delete(
      '/v1/environments/:envID/files',
      {
        // A recursive removal of a large tree takes as long as it takes (the agent allows it 10 minutes).
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: `Removes a file, a link or an empty directory (204); a directory with entries needs recursive=true (409 without it). ${SHARED}`,
          tags,
          params: EnvironmentParams,
          querystring: FileDeleteQuery,
          response: { 204: Type.Null(), ...errors(...KEY_ROUTE_ERRORS, 403, 404, 409) },
        },
      },
      async (request, reply) => {
        await files.remove(tenantOf(request), request.params.envID, request.query.path, request.query.recursive === true);
        return reply.code(204).send(null);
      },
    );
    app.get(
      '/v1/environments/:envID/files/stat',
      {
        config: key,
        schema: { summary: `One file's metadata (a link is described, not followed). ${SHARED}`, tags, params: EnvironmentParams, querystring: FileQuery, response: { 200: FileInfo, ...errors(...KEY_ROUTE_ERRORS, 403, 404, 409) } },
      },
      async (request) => files.stat(tenantOf(request), request.params.envID, request.query.path),
    );
    app.get(
      '/v1/environments/:envID/files/list',
      {
        config: key,
        schema: { summary: `A directory's entries, sorted by name (at most 10,000: truncated past it). ${SHARED}`, tags, params: EnvironmentParams, querystring: FileQuery, response: { 200: FileList, ...errors(...KEY_ROUTE_ERRORS, 403, 404, 409) } },
      },
      async (request) => files.list(tenantOf(request), request.params.envID, request.query.path),
    );
  });
}

type FastifyPluginAsyncTypeboxOf = ReturnType<typeof routePlugin>;
