import type { FastifyRequest } from 'fastify';

export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}

/**
 * The client's address (spec 8): X-Real-Ip is believed only from a loopback peer (the local
 * reverse proxy); X-Forwarded-For is never read, since any client can write it.
 */
export function clientIp(request: FastifyRequest): string {
  const peer = request.socket.remoteAddress ?? 'unknown';
  const realIp = request.headers['x-real-ip'];
  if (isLoopback(peer) && typeof realIp === 'string' && realIp.trim() !== '') return realIp.trim();
  return peer;
}
