// Builds the Fastify server: parsing, validation, the access pipeline, idempotency, timeouts,
// error mapping and the routes. Routes parse and validate, call one domain function, and reply.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import fastifyWebsocket from '@fastify/websocket';
import FindMyWay, { type HTTPMethod } from 'find-my-way';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Deps } from '../app.js';
import { RateLimitedError, ValidationError } from '../errors.js';
import { BODY_LIMIT_BYTES, errorBody, errorHandler, REQUEST_ID_HEADER } from './errors.js';
import { accessGuard } from './guards.js';
import { idempotencyOnSend, idempotencyPreHandler, isIdempotencyCandidate } from './idempotency.js';
import { openApiRoute, registerOpenApi } from './openapi.js';
import { READ_HEADER_TIMEOUT_MS, requestTimeouts, UPLOAD_READ_TIMEOUT_MS } from './timeouts.js';
import { ConnectionCap } from './connection-cap.js';
import { SchemaCompilers } from './schema-compilers.js';
import { registerFollowedStreams } from './streaming.js';
import { activityRoutes } from './routes/activity.js';
import { serviceRoutes } from './routes/services.js';
import { domainRoutes } from './routes/domains.js';
import { buildRoutes } from './routes/builds.js';
import { sourceUploadRoutes } from './routes/source-uploads.js';
import { databaseRoutes } from './routes/databases.js';
import { kanbanRoutes } from './routes/kanban.js';
import { environmentRoutes } from './routes/environments.js';
import { environmentFileRoutes } from './routes/environment-files.js';
import { environmentTerminalRoutes } from './routes/environment-terminal.js';
import { keyRoutes } from './routes/keys.js';
import { webSessionRoutes } from './routes/web-sessions.js';
import { systemRoutes } from './routes/system.js';
import { tenantRoutes } from './routes/tenants.js';
import { meteringRoutes } from './routes/metering.js';
import { dashboardRoutes } from './routes/dashboard.js';
import './route-config.js';

export interface RouteEntry {
  method: string;
  url: string;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Every route svcd serves (HEAD excluded), for the OpenAPI completeness test. */
    svcRoutes: RouteEntry[];
  }
}

export type SvcServer = FastifyInstance<
  import('node:http').Server,
  import('node:http').IncomingMessage,
  import('node:http').ServerResponse,
  import('fastify').FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/**
 * How often Node checks those two timeouts. Its default, 30 s, would let a stalled client hold a
 * connection for up to 35 s instead of 5.
 */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;

/**
 * How long an idle keep-alive connection is held for a client's next request: Fastify's own
 * default, which its `serverFactory` option leaves to Node's (5 s). A client reuses a pooled
 * connection it believes open; at 5 s a request sent as the server closes the connection fails
 * with ECONNRESET (fetch and Node's agent retry no POST), which a client idle for a few seconds
 * between two calls meets (seen in svc's own tests). An idle connection costs a socket and no
 * work, as it does behind any proxy whose idle timeout is this long; one that stalls within a
 * request is still cut at the read timeouts above, and svcd's close ends idle ones at once. How
 * many one client holds at once is capped (connection-cap.ts).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * A client's own X-Request-Id is logged beside ours (client_request_id) when it is this short and
 * plain; it never replaces ours, which is unique, so a log search by it finds one request only.
 */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

function toArray<T>(x: T | T[] | undefined): T[] {
  return x === undefined ? [] : Array.isArray(x) ? x : [x];
}

export interface BuildServerOptions {
  /** Compiled route schemas shared with other servers of this process (a test file's); a server of its own otherwise. */
  schemaCompilers?: SchemaCompilers;
}

export async function buildServer(deps: Deps, o: BuildServerOptions = {}): Promise<SvcServer> {
  // Fastify's base logger type, not pino's own: the instance takes its logger type from this one,
  // and SvcServer's is FastifyBaseLogger.
  const logger: FastifyBaseLogger = deps.log;
  const connectionCap = new ConnectionCap(deps.config.connectionsPerClient, deps.timers);
  const app = Fastify({
    loggerInstance: logger,
    bodyLimit: BODY_LIMIT_BYTES,
    serverFactory: (handler) => {
      const server = http.createServer(
        {
          requestTimeout: UPLOAD_READ_TIMEOUT_MS,
          headersTimeout: READ_HEADER_TIMEOUT_MS,
          connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
        },
        handler,
      );
      server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
      server.on('connection', connectionCap.track);
      return server;
    },
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: true },
    // Our own id for every request (never the client's: see CLIENT_REQUEST_ID); log lines carry it as reqId.
    requestIdHeader: false,
    genReqId: () => randomUUID(),
    childLoggerFactory: (logger, bindings, opts, rawRequest) => {
      const sent = rawRequest.headers[REQUEST_ID_HEADER];
      const clientId = typeof sent === 'string' && CLIENT_REQUEST_ID.test(sent) ? sent : undefined;
      return logger.child(clientId === undefined ? bindings : { ...bindings, client_request_id: clientId }, opts);
    },
  }).withTypeProvider<TypeBoxTypeProvider>();
  // WebSockets (an environment's terminal): Fastify's plugin, so that an upgrade passes the same
  // hooks (request id, credentials, limits) as every request. Registered before those hooks: its
  // own first hook marks the request as an upgrade, and only a marked one has its connection
  // closed after a refusal (a 401 from a later hook would otherwise leave the socket open for
  // good). A frame from a client is input or a resize: 64 KiB at most.
  await app.register(fastifyWebsocket, { options: { maxPayload: 64 * 1024 } });
  const compilers = o.schemaCompilers ?? new SchemaCompilers();
  app.setValidatorCompiler(compilers.validator);
  app.setSerializerCompiler(compilers.serializer);
  app.setErrorHandler(errorHandler);
  // The fields the access pipeline sets on a request (route-config.ts), declared up front so that
  // every request object has one shape, as Fastify advises for V8.
  app.decorateRequest('principal', undefined);
  app.decorateRequest('webSession', undefined);
  app.decorateRequest('rawBody', undefined);
  app.decorateRequest('idempotencyClaim', undefined);
  registerFollowedStreams(app, deps.timers, deps.config.stalledReaderMs);
  // Held ?wait requests (a service's deploy, a build) are answered as they are: the close waits for requests in flight.
  app.addHook('preClose', (done) => {
    deps.waits.endAll();
    done();
  });

  // Bodies are JSON whatever the Content-Type says (clients such as curl -d send form types);
  // the raw text is kept for the idempotency fingerprint.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (request: FastifyRequest, body: string | Buffer, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    request.rawBody = text;
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(new ValidationError(`malformed JSON: ${(err as Error).message}`), undefined);
    }
  });

  // A mirror of the route table, so that a known path with the wrong method answers 405.
  const known = FindMyWay();
  const table: RouteEntry[] = [];
  app.decorate('svcRoutes', table);
  const claimIdempotency = idempotencyPreHandler(deps);
  const storeIdempotent = idempotencyOnSend(deps);
  app.addHook('onRoute', (route) => {
    const methods = (Array.isArray(route.method) ? route.method : [route.method]).map((x) => x.toUpperCase() as HTTPMethod);
    for (const m of methods) {
      if (m !== 'HEAD' && !known.hasRoute(m, route.url)) {
        known.on(m, route.url, () => {});
        table.push({ method: m, url: route.url });
      }
    }
    // Idempotency hooks only where they can apply, so reads pay nothing for them.
    const svc = route.config?.svc;
    if (svc && isIdempotencyCandidate(svc, methods)) {
      route.preHandler = [...toArray(route.preHandler), claimIdempotency];
      route.onSend = [...toArray(route.onSend), storeIdempotent];
    }
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = METHODS.filter((m) => known.find(m, path) !== null);
    // The mirror may match what the router did not (an empty parameter: `/assets/`): not a 405.
    if (allowed.length > 0 && !allowed.includes(request.method as (typeof METHODS)[number])) {
      return reply.code(405).header('allow', allowed.join(', ')).send(errorBody(request, `method ${request.method} not allowed on ${path}`));
    }
    return reply.code(404).send(errorBody(request, `no route for ${request.method} ${path}`));
  });

  // Operator metrics: every answer by route pattern (unknown paths share one label), and 429s by limiter.
  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.requestDone(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime / 1000);
  });
  app.addHook('onError', async (_request, _reply, err) => {
    if (err instanceof RateLimitedError) deps.metrics.rateLimitRejected(err.limiter);
  });

  // First of all hooks, so that every answer carries it, refusals by the later hooks included.
  // A connection past its client's cap is answered here, before anything of the request runs,
  // and closed with the answer.
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header(REQUEST_ID_HEADER, request.id);
    const refusal = connectionCap.refusal(request.raw.socket);
    if (refusal) {
      void reply.header('connection', 'close');
      done(refusal);
      return;
    }
    done();
  });
  // The timeout starts next, so that slow credential checks count against it too.
  const timeouts = requestTimeouts(app, deps);
  app.addHook('onRequest', accessGuard(deps));
  app.addHook('onRequest', timeouts.afterAuthentication);
  app.addHook('onRequestAbort', async (request) => {
    const claim = request.idempotencyClaim;
    if (claim) await deps.store.idempotency.release(claim.tenantId, claim.key);
  });

  await registerOpenApi(app);
  await app.register(systemRoutes(deps));
  await app.register(tenantRoutes(deps));
  await app.register(keyRoutes(deps));
  await app.register(webSessionRoutes(deps));
  await app.register(activityRoutes(deps));
  await app.register(serviceRoutes(deps));
  await app.register(domainRoutes(deps));
  await app.register(buildRoutes(deps));
  await app.register(sourceUploadRoutes(deps));
  await app.register(databaseRoutes(deps));
  await app.register(kanbanRoutes(deps));
  await app.register(environmentRoutes(deps));
  await app.register(environmentFileRoutes(deps));
  await app.register(environmentTerminalRoutes(deps));
  await app.register(meteringRoutes(deps));
  await app.register(dashboardRoutes(deps));
  openApiRoute(app);
  await app.ready();
  return app;
}
