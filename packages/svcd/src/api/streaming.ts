import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Timers } from '../clock.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Followed logs being written now: a closing server ends them (they would never end on their own). */
    followedStreams: Map<ServerResponse, NodeJS.ReadableStream>;
    /** Ends a followed stream whose client stopped taking it (see streamFollow). */
    stalledReaders: { timers: Timers; afterMs: number };
  }
}

/** Keeps the open followed streams of a server, and ends them when the server closes. */
export function registerFollowedStreams(app: FastifyInstance, timers: Timers, stalledReaderMs: number): void {
  app.decorate('followedStreams', new Map<ServerResponse, NodeJS.ReadableStream>());
  app.decorate('stalledReaders', { timers, afterMs: stalledReaderMs });
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
 * are closed. A client that has taken nothing for `stalledReaders.afterMs` while more waits for it
 * (the answer's buffer full, no drain since) is cut: it would otherwise hold its stream's slot for
 * good. A stream with nothing to send (an idle service) is not stalled: nothing waits.
 */
export function streamFollow(reply: FastifyReply, stream: NodeJS.ReadableStream): void {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { ...(reply.getHeaders() as Record<string, string>), 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.flushHeaders();
  const open = reply.server.followedStreams;
  open.set(res, stream);
  const { timers, afterMs } = reply.server.stalledReaders;
  let stalledSince: number | null = null;
  let checks = 0;
  res.on('drain', () => (stalledSince = null));
  // Checked four times over the allowed stall: cut within 1.25 times of it.
  const watch = timers.setInterval(() => {
    checks++;
    if (!res.writableNeedDrain) stalledSince = null;
    else if (stalledSince === null) stalledSince = checks;
    else if (checks - stalledSince >= 4) res.destroy();
  }, afterMs / 4);
  pipeline(stream, res, (err) => {
    watch.cancel();
    open.delete(res);
    // A source that failed midway has no way left to say so but a cut connection (an answer
    // the server ended on shutdown is complete as it is).
    if (err && !res.writableEnded) res.destroy();
  });
}
