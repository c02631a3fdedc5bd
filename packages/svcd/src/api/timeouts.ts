import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';

import type { Deps } from '../app.js';
import { errorBody } from './errors.js';

/**
 * Server timeouts of spec 8: read 10 s, read-header 5 s (write: the 30 s request timeout below).
 * Node holds every request to the longest read any route allows (an upload's: server.ts); the
 * 10 s of every other route is this module's, per route.
 */
export const READ_TIMEOUT_MS = 10_000;
export const READ_HEADER_TIMEOUT_MS = 5_000;
/** The longest a route lets its body take (uploads of source archives and files: a slow uplink). */
export const UPLOAD_READ_TIMEOUT_MS = 10 * 60_000;

/** How often in-flight requests are checked against their deadline. */
export const TIMEOUT_SWEEP_MS = 250;

declare module 'fastify' {
  interface FastifyReply {
    /** When this request times out, on the injected clock (ms); 0 for routes without a timeout. */
    timeoutDeadlineMs: number;
  }
}

/**
 * What Node does at its own request timeout: 408 and the connection closed. The body is cut, so
 * whatever reads it (a parser, an upload) ends with an error and the route never answers on this
 * socket; the 408 is written to the socket directly unless an answer has begun.
 */
function cutSlowBody(raw: IncomingMessage, answered: boolean): void {
  const socket = raw.socket;
  if (socket.destroyed) return;
  if (answered) socket.destroy();
  else socket.end('HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n', () => socket.destroy());
}

/**
 * The read timeout (spec 8: 10 s) of a request's body, per route: an upload's route allows
 * longer (bodyReadMs), which Node's single server-wide requestTimeout could not; Node keeps the
 * longest as its own bound. Checked by the same sweep.
 *
 * The 30 s request timeout (spec 8): a route that has not answered by then gets 503. Routes
 * marked longRunning (logs, exec, long creates) have none.
 *
 * One interval sweeps the in-flight requests instead of a timer per request: arming and clearing
 * a Node timer on every request cost nearly a tenth of the CPU of an authenticated GET, and a
 * 30 s limit does not need millisecond precision. The timers are injected, so the rule is tested
 * without waiting.
 *
 * The deadline lives on the reply (a decorated field) and the set holds replies only while they
 * are in flight. An earlier version kept a WeakMap from request to an entry that referred back to
 * the request: V8's young-generation collector keeps such ephemerons alive, so every answered
 * request was copied twice and promoted (about 4 KB each), each scavenge took 10 ms instead of
 * 1, and p99 at 1,000 req/s went from about 1 ms to 5-10 ms (bench/api).
 */
export function requestTimeouts(app: FastifyInstance, deps: Deps): { afterAuthentication: onRequestHookHandler } {
  const inFlight = new Set<FastifyReply>();
  /** Requests whose body is still coming, with when it must have come (the read timeout). */
  const reading = new Map<FastifyReply, number>();
  app.decorateReply('timeoutDeadlineMs', 0);
  const sweeper = deps.timers.setInterval(() => {
    const now = deps.clock.now();
    for (const [reply, deadline] of reading) {
      const raw = reply.request.raw;
      if (raw.complete || raw.destroyed) reading.delete(reply);
      else if (deadline <= now) {
        reading.delete(reply);
        cutSlowBody(raw, reply.raw.headersSent);
      }
    }
    for (const reply of inFlight) {
      if (reply.timeoutDeadlineMs > now) continue;
      inFlight.delete(reply);
      if (!reply.sent) {
        reply.request.log.warn({ url: reply.request.url }, 'request timed out');
        void reply.code(503).send(errorBody(reply.request, 'request timed out'));
      }
    }
  }, TIMEOUT_SWEEP_MS);
  app.addHook('onClose', (_app, done) => {
    sweeper.cancel();
    done();
  });

  // Callback-style hooks: on the hot path they cost no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    const route = request.routeOptions.config.svc;
    // A body still coming once the headers are read (most are complete by now, and cost nothing here).
    if (!request.raw.complete) reading.set(reply, deps.clock.now() + READ_TIMEOUT_MS);
    if (route && !route.longRunning) {
      reply.timeoutDeadlineMs = deps.clock.now() + deps.requestTimeoutMs;
      inFlight.add(reply);
    }
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    inFlight.delete(reply);
    // Held no longer than the request (as inFlight): an entry kept until the next sweep would
    // outlive a young-generation collection and be promoted, per POST (see above). A body still
    // coming after the answer (a refusal before it was read, then a client that goes on sending
    // slowly) stays, so that it is cut at its deadline.
    if (request.raw.complete) reading.delete(reply);
    done();
  });
  return {
    /**
     * Registered after the credential check: an upload's route gives its body longer
     * (bodyReadMs) only to an authenticated request, so that nobody without a key can hold a
     * connection open for minutes by sending slowly.
     */
    afterAuthentication(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
      const bodyReadMs = request.routeOptions.config.svc?.bodyReadMs;
      if (bodyReadMs !== undefined && request.principal && reading.has(reply)) reading.set(reply, deps.clock.now() + bodyReadMs);
      done();
    },
  };
}
