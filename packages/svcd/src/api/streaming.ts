import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';

declare module 'fastify' {
  interface FastifyInstance {
    /** Followed logs being written now: a closing server ends them (they would never end on their own). */
    followedStreams: Map<ServerResponse, NodeJS.ReadableStream>;
  }
}

/** Keeps the open followed streams of a server, and ends them when the server closes. */
export function registerFollowedStreams(app: FastifyInstance): void {
  app.decorate('followedStreams', new Map<ServerResponse, NodeJS.ReadableStream>());
  app.addHook('preClose', (done) => {
    for (const [res, stream] of app.followedStreams) {
      res.end();
      (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
    }
    done();
  });
}

/**
 * A followed log answers 200 at once (headers flushed before any line exists) and then passes
 * each chunk on as it comes, until the stream ends (the container's or the build's), the client
 * leaves, or the server shuts down. The reply is written directly: Fastify would hold the headers
 * back until the first chunk. `pipeline` reads the source only as fast as the client takes it, so
 * a client that stops reading costs one socket buffer, not the log; when either side goes, both
 * are closed.
 */
export function streamFollow(reply: FastifyReply, stream: NodeJS.ReadableStream): void {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { ...(reply.getHeaders() as Record<string, string>), 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.flushHeaders();
  const open = reply.server.followedStreams;
  open.set(res, stream);
  pipeline(stream, res, (err) => {
    open.delete(res);
    // A source that failed midway has no way left to say so but a cut connection (an answer
    // the server ended on shutdown is complete as it is).
    if (err && !res.writableEnded) res.destroy();
  });
}
