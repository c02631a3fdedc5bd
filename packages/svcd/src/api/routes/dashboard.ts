// The dashboard's pages and assets at / (packages/dashboard). Not API routes: no credentials,
// no limits (answers come from memory), not in the OpenAPI document. The page itself calls the
// API with its session cookie (auth/web-sessions.ts).
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../../app.js';
import { type DashboardFile, loadDashboardFiles } from '../../dashboard/dashboard-files.js';
import { errorBody } from '../errors.js';

/**
 * No inline script or style, nothing from elsewhere, never framed (clickjacking): the page's
 * whole code is the hashed bundle served here.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/** Hashed file names (Vite's `assets/name-HASH.ext`) never change content: cached for a year. */
const IMMUTABLE = 'public, max-age=31536000, immutable';

function send(request: FastifyRequest, reply: FastifyReply, file: DashboardFile, cacheControl: string): FastifyReply {
  const acceptsGzip = /\bgzip\b/.test(request.headers['accept-encoding'] ?? '');
  void reply
    .header('content-type', file.contentType)
    .header('cache-control', cacheControl)
    .header('x-content-type-options', 'nosniff')
    .header('vary', 'accept-encoding');
  if (file.gzipped && acceptsGzip) return reply.header('content-encoding', 'gzip').send(file.gzipped);
  return reply.send(file.body);
}

export function dashboardRoutes(deps: Deps): FastifyPluginAsync {
  return async (app) => {
    const files = await loadDashboardFiles(deps.config.dashboardDir);
    if (files === null) deps.log.warn({ dir: deps.config.dashboardDir }, 'dashboard not built: / answers 404 (make build)');

    app.get('/', { schema: { hide: true } }, (request, reply) => {
      const index = files?.get('/index.html');
      if (!index) return reply.code(404).send(errorBody(request, 'the dashboard is not built on this svcd (make build)'));
      void reply
        .header('content-security-policy', DASHBOARD_CSP)
        .header('x-frame-options', 'DENY')
        .header('referrer-policy', 'no-referrer');
      // Always revalidated: it names the current build's hashed assets.
      return send(request, reply, index, 'no-cache');
    });

    app.get<{ Params: { name: string } }>('/assets/:name', { schema: { hide: true } }, (request, reply) => {
      const file = files?.get(`/assets/${request.params.name}`);
      if (!file) return reply.code(404).send(errorBody(request, `no dashboard asset ${request.params.name}`));
      return send(request, reply, file, IMMUTABLE);
    });
  };
}
