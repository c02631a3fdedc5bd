// Every route group is a Fastify plugin that registers its routes and nothing else.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

type App = Parameters<FastifyPluginAsyncTypebox>[0];

/**
 * The plugin of a route group: `register` adds the routes, waiting for nothing. Fastify's plugin
 * interface is async, and the plugin stays an async function so that an error while registering
 * (a duplicate route, a schema Fastify refuses) rejects its promise and fails app.register(),
 * rather than being thrown out of Fastify's plugin loader.
 */
export function routePlugin(register: (app: App) => void): FastifyPluginAsyncTypebox {
  // eslint-disable-next-line @typescript-eslint/require-await -- async for the interface and for the rejection (above)
  return async (app) => {
    register(app);
  };
}
