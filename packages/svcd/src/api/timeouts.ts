import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../app.js';

export const REQUEST_TIMEOUT_MS = 30_000;
/** How often in-flight requests are checked against their deadline. */
export const TIMEOUT_SWEEP_MS = 250;

interface InFlight {
  request: FastifyRequest;
  reply: FastifyReply;
  deadlineMs: number;
}

/**
 * The 30 s request timeout (spec 8): a route that has not answered by then gets 503. Routes
 * marked longRunning (logs, exec, long creates) have none.
 *
 * One interval sweeps the in-flight requests instead of a timer per request: arming and clearing
 * a Node timer on every request cost nearly a tenth of the CPU of an authenticated GET, and a
 * 30 s limit does not need millisecond precision. The timers are injected, so the rule is tested
 * without waiting.
 */
export function requestTimeouts(app: FastifyInstance, deps: Deps): void {
  const inFlight = new Set<InFlight>();
  const entries = new WeakMap<FastifyRequest, InFlight>();
  const sweeper = deps.timers.setInterval(() => {
    const now = deps.clock.now();
    for (const e of inFlight) {
      if (e.deadlineMs > now) continue;
      inFlight.delete(e);
      if (!e.reply.sent) {
        e.request.log.warn({ url: e.request.url }, 'request timed out');
        void e.reply.code(503).send({ error: 'request timed out' });
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
      const e = { request, reply, deadlineMs: deps.clock.now() + deps.requestTimeoutMs };
      inFlight.add(e);
      entries.set(request, e);
    }
    done();
  });
  app.addHook('onResponse', (request, _reply, done) => {
    const e = entries.get(request);
    if (e) inFlight.delete(e);
    done();
  });
}
