import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Deps } from '../app.js';
import { errorBody } from './errors.js';

/** How often in-flight requests are checked against their deadline. */
export const TIMEOUT_SWEEP_MS = 250;

declare module 'fastify' {
  interface FastifyReply {
    /** When this request times out, on the injected clock (ms); 0 for routes without a timeout. */
    timeoutDeadlineMs: number;
  }
}

/**
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
export function requestTimeouts(app: FastifyInstance, deps: Deps): void {
  const inFlight = new Set<FastifyReply>();
  app.decorateReply('timeoutDeadlineMs', 0);
  const sweeper = deps.timers.setInterval(() => {
    const now = deps.clock.now();
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
    if (route && !route.longRunning) {
      reply.timeoutDeadlineMs = deps.clock.now() + deps.requestTimeoutMs;
      inFlight.add(reply);
    }
    done();
  });
  app.addHook('onResponse', (_request, reply, done) => {
    inFlight.delete(reply);
    done();
  });
}
