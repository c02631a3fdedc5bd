import type { FastifyReply } from 'fastify';

/**
 * A followed log answers 200 at once (headers flushed before any line exists) and then passes
 * each chunk on as it comes, until the stream ends (the container's or the build's) or the
 * client leaves. The reply is written directly: Fastify would hold the headers back until the
 * first chunk.
 */
export function streamFollow(reply: FastifyReply, stream: NodeJS.ReadableStream & { destroy?: () => void }): void {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { ...(reply.getHeaders() as Record<string, string>), 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.flushHeaders();
  stream.on('data', (chunk: Buffer) => res.write(chunk));
  stream.on('end', () => res.end());
  stream.on('error', () => res.end());
  res.on('close', () => stream.destroy?.());
}

