// Uploads of source archives to build from (beyond the spec): builds/source-uploads.ts holds the rules.
import {
  SOURCE_ARCHIVE_MAX_BYTES,
  SOURCE_ARCHIVE_MAX_ENTRIES,
  SOURCE_ARCHIVE_UNUSED_TTL_SECONDS,
  SOURCE_ARCHIVES_STORED_MAX,
  SOURCE_UNPACKED_MAX_BYTES,
  ServiceIdParams,
  SourceUpload,
  SourceUploadQuery,
} from '@svc/contract';
import type { Readable } from 'node:stream';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { UPLOAD_READ_TIMEOUT_MS } from '../timeouts.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

const MB = 1024 * 1024;

export function sourceUploadRoutes(deps: Deps): ReturnType<typeof routePlugin> {
  const { builds } = deps;
  return routePlugin((app) => {
    // The archive is the body, not JSON: in this plugin (Fastify scopes parsers to it) a body of
    // any type reaches the route as the request's stream, read with backpressure and capped by
    // the domain, within ten minutes (not the 10 s read timeout of other routes: a slow uplink).
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

    app.post(
      '/v1/services/:serviceID/sources',
      {
        // The body is not kept, so a replay could not tell two uploads apart: never replayed (an
        // upload that is sent again is stored again, and expires unused; with ?build=true it is
        // built again).
        config: { svc: { auth: 'key', longRunning: true, noIdempotency: true, bodyReadMs: UPLOAD_READ_TIMEOUT_MS } },
        schema: {
          summary:
            `Uploads a source archive to build the service from (201), the first step of a build from a directory (\`svc deploy\`): a tar, gzipped or not (any content type), with a Dockerfile at its root. ` +
            `At most ${SOURCE_ARCHIVE_MAX_BYTES / MB} MB as sent and ${SOURCE_UNPACKED_MAX_BYTES / MB} MB unpacked (413), ${SOURCE_ARCHIVE_MAX_ENTRIES} entries; ` +
            'names must be relative without `..`, links must stay inside the archive, and only files, directories and links are allowed (400 with the reason). ' +
            `Then POST /v1/services/{id}/builds with source_type archive and this id, or ask for both in this one request with ?build=true (the build is answered under \`build\`; a build the tenant cannot queue now, its queue of builds full, is 409 and the archive is not kept). Not replayed by Idempotency-Key (the body is not kept): a request sent again uploads again, and with ?build=true builds again. A tenant has at most ${SOURCE_ARCHIVES_STORED_MAX} archives stored at once, waiting for a build or being built (409 \`quota exceeded\`); one no build took is removed ${SOURCE_ARCHIVE_UNUSED_TTL_SECONDS / 60} minutes after its upload, and a build's archive when the build ends. A refusal closes the connection (the rest of the body is not read). The body may take ${UPLOAD_READ_TIMEOUT_MS / 60_000} minutes to arrive (other routes: 10 s)`,
          tags: ['builds'],
          params: ServiceIdParams,
          querystring: SourceUploadQuery,
          response: { 201: SourceUpload, ...errors(...KEY_ROUTE_ERRORS, 404, 409, 413) },
        },
      },
      async (request, reply) => {
        const declared = request.headers['content-length'] === undefined ? undefined : Number(request.headers['content-length']);
        const body = (request.body as Readable | undefined) ?? request.raw;
        try {
          return await reply.code(201).send(await builds.upload(tenantOf(request), request.params.serviceID, body, declared, { build: request.query.build === true }));
        } catch (err) {
          // What the client still sends after a refusal is not read: the connection closes after the answer.
          void reply.header('connection', 'close');
          throw err;
        }
      },
    );
  });
}
