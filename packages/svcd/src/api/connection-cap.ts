// How many connections one client may hold open to the API at once. Idle keep-alive connections
// are held 72 s (server.ts): a client sending one cheap request a minute on each could otherwise
// hold thousands, and every one is a file descriptor of svcd's (its limit is the process's,
// shared with the store, the engine's sockets and the logs) and a little memory.
//
// This counts where svcd's listener is reached directly. By default it listens on loopback, and
// every client comes through the proxy on this host (svc's own Caddy for api.<base-domain>):
// loopback peers are not counted, as they are trusted for X-Real-Ip (client-ip.ts), since every
// client behind a local proxy shares its address; the proxy holds the client connections then.
import type { Socket } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { Timers } from '../clock.js';
import { RateLimitedError } from '../errors.js';
import { isLoopback } from './client-ip.js';

/** A refused connection is closed this long after it came, whatever its client sends or reads. */
const REFUSED_CLOSE_MS = 1_000;

/**
 * Whom a connection counts for: an IPv4 address (also written IPv4-mapped), or an IPv6 address's
 * /64, which one client usually holds whole (a fresh address per connection is free to it).
 * Parsed with ipaddr.js (Fastify's own proxy-addr uses it) rather than by hand: IPv6's shortened
 * and mixed forms are easy to get wrong.
 */
export function clientOf(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  return `${(parsed as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16)).join(':')}::/64`;
}

export class ConnectionCap {
  /** Open connections by client (clientOf); an entry goes with its last connection. */
  private readonly open = new Map<string, number>();
  /** Connections past the cap: a request on one is answered 429 (refusal()), never served. */
  private readonly refused = new WeakSet<Socket>();

  constructor(
    private readonly max: number,
    private readonly timers: Timers,
  ) {}

  /** The server's 'connection' listener. */
  readonly track = (socket: Socket): void => {
    const address = socket.remoteAddress;
    if (address === undefined || isLoopback(address)) return;
    const client = clientOf(address);
    const held = this.open.get(client) ?? 0;
    if (held >= this.max) {
      this.refused.add(socket);
      // Closed whatever its client does: one that sends nothing (or does not read) must not
      // hold the socket until the header timeout. One that closed sooner holds no timer.
      const closing = this.timers.setTimeout(() => socket.destroy(), REFUSED_CLOSE_MS);
      socket.once('close', () => closing.cancel());
      return;
    }
    this.open.set(client, held + 1);
    socket.once('close', () => {
      const left = (this.open.get(client) ?? 1) - 1;
      if (left === 0) this.open.delete(client);
      else this.open.set(client, left);
    });
  };

  /**
   * The error a request on this socket is answered with, before anything else runs (the first
   * hook, server.ts), or null when its connection is within the cap. The parser Node attached to
   * the connection reads requests whatever the cap says: refusing the socket itself would leave
   * them to run unanswered.
   */
  refusal(socket: Socket): RateLimitedError | null {
    if (!this.refused.has(socket)) return null;
    return new RateLimitedError(1, 'client_connections', `too many open connections from this address (at most ${this.max}): reuse or close some`);
  }
}
