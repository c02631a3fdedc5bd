import type { FastifyInstance } from 'fastify';
import type { Deps } from '../app.js';
import type { TimerHandle } from '../clock.js';

export const REQUEST_TIMEOUT_MS = 30_000;

/**
 * The 30 s request timeout (spec 8): a route that has not answered by then gets 503. Routes
 * marked longRunning (logs, exec, long creates) have none. The timer is injected, so the rule
 * is tested without waiting 30 s.
 */
export function requestTimeouts(app: FastifyInstance, deps: Deps): void {
  const timers = new WeakMap<object, TimerHandle>();
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.config.svc;
    if (!route || route.longRunning) return;
    timers.set(
      request,
      deps.timers.setTimeout(() => {
        if (!reply.sent) {
          request.log.warn({ url: request.url }, 'request timed out');
          void reply.code(503).send({ error: 'request timed out' });
        }
      }, deps.requestTimeoutMs),
    );
  });
  app.addHook('onResponse', async (request) => {
    timers.get(request)?.cancel();
    timers.delete(request);
  });
}
