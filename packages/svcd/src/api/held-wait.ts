import type { FastifyReply, FastifyRequest } from 'fastify';
import type { HeldWaits } from '../sessions/held-waits.js';

/**
 * Answers a ?wait request with what `wait` resolves to, handing it a signal that ends when the
 * client hangs up (which frees its place under the caps) or when someone else answered meanwhile
 * (the request timeout's 503). An answer sent because the server is closing takes the connection
 * with it: kept alive, it would hold the close until the client let it go.
 */
export async function answerHeldWait<T>(request: FastifyRequest, reply: FastifyReply, waits: Pick<HeldWaits, 'closing'>, wait: (gone: AbortSignal) => Promise<T>): Promise<T> {
  // The listener goes before this handler's own answer is sent, so a close it hears is one of
  // those; one that came before the handler ran is seen on the socket.
  const gone = new AbortController();
  const hungUp = () => gone.abort();
  reply.raw.once('close', hungUp);
  if (reply.raw.destroyed || request.raw.socket.destroyed) gone.abort();
  try {
    const answer = await wait(gone.signal);
    if (waits.closing) void reply.header('connection', 'close');
    return answer;
  } finally {
    reply.raw.off('close', hungUp);
  }
}
