// How many connections one client address may hold open to the API at once. Idle keep-alive
// connections are held 72 s (server.ts): a client sending one cheap request a minute on each
// could otherwise hold thousands, and every one is a file descriptor of svcd's (its limit is the
// process's, shared with the store, the engine's sockets and the logs) and a little memory.
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Where a proxy on this host connects from (svc's own Caddy for api.<base-domain>, an operator's
 * front proxy): not capped, since every client behind it shares that address; the proxy holds
 * only as many connections to svcd as it has requests in flight, and those are what svcd's own
 * limits count. Other loopback addresses (a local process that binds one) are capped as any client.
 */
function isLocalProxyAddress(address: string): boolean {
  return address === '127.0.0.1' || address === '::1' || address === '::ffff:127.0.0.1';
}

/**
 * Answers a client past `max` open connections (--connections-per-client) with 429 and closes the new connection (its
 * others are untouched). Counted in this process, as the sockets are.
 */
export function capConnectionsPerClient(server: Server, max: number): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || isLocalProxyAddress(address)) return;
    const held = open.get(address) ?? 0;
    if (held >= max) {
      const body = JSON.stringify({ error: `too many open connections from this address (at most ${max}): reuse or close some` });
      socket.end(`HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n${body}`);
      // A client that does not read its answer must not hold the socket: it goes within a second.
      setTimeout(() => socket.destroy(), 1_000).unref();
      return;
    }
    open.set(address, held + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}
