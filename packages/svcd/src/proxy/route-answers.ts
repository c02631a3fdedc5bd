// What Caddy asks svcd while it serves requests, so that a workload moving (a deploy, a stop, a
// crash, a task rescheduled) is not a configuration load. Caddy 2.6 closes every proxied
// WebSocket and streamed response, of every tenant, on each load (README, "What a route change
// costs"); so the configuration names only each route's hosts and port, and Caddy asks two
// things here:
//
// - Where a route's workload answers now: a DNS question for `<routeId>.svc-upstream.` (Caddy's
//   dynamic upstreams, asked again every second while the route has traffic), answered over UDP
//   with the running workload's address, and with no address while nothing runs (Caddy then
//   fails the request with 503, and its error route asks for the page).
// - The page of a route that does not answer (Caddy's error routes forward the failed request
//   here): "Service web is stopped." while nothing runs, a short note with the error's status
//   when it runs and does not answer.
//
// Caddy 2.6 looks an address up holding one lock for every route, and does not keep a failed
// lookup: every question is answered at once from memory, never after a store read. The routes
// are read from the store every SNAPSHOT_EVERY_MS (and on each push), so every svcd's Caddy
// follows a change any svcd made. Both listeners are on one loopback port (--proxy-answers-listen):
// the questions are Caddy's on svcd's host, and the answers name tenants' internal addresses,
// which only the host's own processes may learn (they could ask the engine as well).
import { createSocket, type Socket } from 'node:dgram';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
// dns-packet: a well-kept encoder and decoder of the DNS wire format (used by mdns and
// multicast-dns); svc answers one kind of question and writes none of the format itself.
import dnsPacket, { type Answer, type Packet } from 'dns-packet';
import type { Logger } from 'pino';
import type { Clock, TimerHandle, Timers } from '../clock.js';
import { ERROR_STATUS_HEADER, UPSTREAM_REFRESH_S, splitUpstreams, upstreamName, type RouteAnswerAddresses, type RouteTarget } from './caddy-config.js';

/** How often the routes are read from the store for the answers: a change made by another svcd is answered within this (and the read). */
export const SNAPSHOT_EVERY_MS = 500;

/**
 * How long after a route moved every svcd's Caddy has stopped sending new requests to the old
 * address: Caddy's refresh, the snapshot's period, and a margin for the store's read. A rolling
 * deploy waits this long before it stops the workload it replaced.
 */
export const ROUTE_FOLLOW_MS = UPSTREAM_REFRESH_S * 1000 + SNAPSHOT_EVERY_MS + 1_500;
/**
 * Past this without a good read of the routes, addresses are no longer given (SERVFAIL: Caddy
 * answers 503): another svcd may have stopped the workload an old answer names, and its address
 * may be given to another workload since.
 */
export const STALE_AFTER_MS = 30_000;
/** Tries at binding UDP on the port TCP got (port 0): another program may hold it for UDP. */
const SHARED_PORT_TRIES = 20;
/** The opcode bits of the header's flags (dns-packet keeps them there): 0 is a standard query. */
const OPCODE_MASK = 0x7800;
const RCODE_FORMERR = 1;
const RCODE_SERVFAIL = 2;
const RCODE_NXDOMAIN = 3;
const NOT_FOUND_PAGE = 'No service at this address.\n';

/** The routes as the answers need them: by upstream name and by host. */
interface Snapshot {
  /** Which read it came from (reads are numbered as they start: a later one wins, whatever the clock does). */
  read: number;
  /** When that read started (ms): how stale the answers are. */
  readAtMs: number;
  byName: Map<string, RouteTarget>;
  byHost: Map<string, RouteTarget>;
}

function snapshotOf(targets: RouteTarget[], read: number, readAtMs: number): Snapshot {
  const byName = new Map<string, RouteTarget>();
  const byHost = new Map<string, RouteTarget>();
  for (const t of targets) {
    byName.set(upstreamName(t.routeId).toLowerCase(), t);
    for (const h of t.hosts) byHost.set(h.toLowerCase(), t);
  }
  return { read, readAtMs, byName, byHost };
}

/** The answer to one DNS query (pure: tested without a socket). */
export function answerQuery(query: Packet, routeOf: (name: string) => RouteTarget | undefined): Packet {
  const question = query.questions?.[0];
  // Authoritative: an empty answer is "this name has no address now", not a lame referral.
  const flags = dnsPacket.AUTHORITATIVE_ANSWER | ((query.flags ?? 0) & dnsPacket.RECURSION_DESIRED);
  const reply = { id: query.id ?? 0, type: 'response' as const, flags, questions: question ? [question] : [], answers: [], authorities: [], additionals: [] };
  // The response code is the flags' low four bits (dns-packet writes them as given).
  if (!question) return { ...reply, flags: flags | RCODE_FORMERR };
  const target = routeOf(question.name.toLowerCase().replace(/\.?$/, '.'));
  // A name svc does not route: no such name (Caddy answers 503, as for a stopped workload).
  if (!target) return { ...reply, flags: flags | RCODE_NXDOMAIN };
  const type = question.type;
  if (type !== 'A' && type !== 'AAAA') return reply;
  // Every replica's address (Caddy balances among them), of the family asked; only those on the
  // route's port, which is what Caddy dials them at (an address on another port is the
  // configuration's to name, never this answer's: Caddy would dial the route's port there).
  const hosts = target.upstream === null ? [] : splitUpstreams(target.upstream).filter((a) => a.port === target.port).map((a) => a.host);
  const answers = hosts
    .filter((host) => isIP(host) === (type === 'A' ? 4 : 6))
    .map((host): Answer => ({ type, name: question.name, class: 'IN', ttl: UPSTREAM_REFRESH_S, data: host }));
  return { ...reply, answers };
}

export interface RouteAnswersOptions {
  /** Loopback address and port (0: one picked at start) for both listeners. */
  listen: { host: string; port: number };
  /** The routes as the store has them now. */
  targets: () => Promise<RouteTarget[]>;
  clock: Clock;
  timers: Timers;
  log: Logger;
}

export class RouteAnswers {
  private snapshot: Snapshot = snapshotOf([], 0, Number.NEGATIVE_INFINITY);
  private reads = 0;
  private reading = false;
  private staleSaid = false;
  private refresher: TimerHandle | null = null;
  private dns: Socket | null = null;
  private pages: Server | null = null;

  constructor(private readonly o: RouteAnswersOptions) {}

  /** Starts both listeners on one loopback port, then reads the routes; where they are, for Caddy's configuration. */
  async start(): Promise<RouteAnswerAddresses> {
    const port = await this.listen();
    await this.refresh();
    this.refresher = this.o.timers.setInterval(() => void this.refresh(), SNAPSHOT_EVERY_MS);
    return { resolver: `udp/${this.o.listen.host}:${String(port)}`, pages: `${this.o.listen.host}:${String(port)}` };
  }

  /** A read of the routes begins: its number, for update(). */
  beginRead(): { read: number; atMs: number } {
    return { read: ++this.reads, atMs: this.o.clock.now() };
  }

  /** The routes a read (beginRead) returned: answers use them at once, unless a later read's came first. */
  update(targets: RouteTarget[], began: { read: number; atMs: number }): void {
    if (began.read <= this.snapshot.read) return;
    this.snapshot = snapshotOf(targets, began.read, began.atMs);
    if (this.staleSaid) this.o.log.info('route answers: the routes are read again; addresses are given again');
    this.staleSaid = false;
  }

  async close(): Promise<void> {
    this.refresher?.cancel();
    const dns = this.dns;
    this.dns = null;
    dns?.close();
    const pages = this.pages;
    if (pages) {
      pages.closeAllConnections();
      await new Promise((r) => pages.close(r));
    }
  }

  /** One read of the routes at a time; a failed one leaves the last ones read (and says so). */
  private async refresh(): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    const began = this.beginRead();
    try {
      this.update(await this.o.targets(), began);
    } catch (err) {
      this.o.log.warn({ err }, 'route answers: the routes could not be read; answering from the last ones read');
    } finally {
      this.reading = false;
    }
  }

  /** The page server on TCP and the DNS server on UDP, on the same port; the port. */
  private async listen(): Promise<number> {
    const { host } = this.o.listen;
    for (let attempt = 1; ; attempt++) {
      const pages = createServer((req, res) => this.answerPage(req, res));
      // A request to a route that does not answer may carry a body; the page never reads it.
      pages.requestTimeout = 10_000;
      await new Promise<void>((resolve, reject) => {
        pages.once('error', reject);
        pages.listen(this.o.listen.port, host, () => {
          pages.off('error', reject);
          resolve();
        });
      });
      pages.on('error', (err) => this.o.log.warn({ err }, 'route answers: page server error'));
      const port = (pages.address() as AddressInfo).port;
      const dns = createSocket('udp4');
      try {
        await new Promise<void>((resolve, reject) => {
          dns.once('error', reject);
          dns.bind(port, host, () => {
            dns.off('error', reject);
            resolve();
          });
        });
      } catch (err) {
        dns.close();
        await new Promise((r) => pages.close(r));
        // A port picked for TCP that UDP has taken elsewhere: pick another.
        if (this.o.listen.port === 0 && attempt < SHARED_PORT_TRIES) continue;
        throw err;
      }
      dns.on('message', (msg, peer) => this.answerDns(msg, peer.address, peer.port));
      dns.on('error', (err) => this.o.log.warn({ err }, 'route answers: DNS socket error'));
      this.dns = dns;
      this.pages = pages;
      return port;
    }
  }

  private answerDns(msg: Buffer, address: string, port: number): void {
    let query: Packet;
    try {
      query = dnsPacket.decode(msg);
    } catch {
      return; // not DNS: no answer, as any server
    }
    // Questions only (opcode QUERY): a response or anything else gets no answer.
    if (query.type !== 'query' || (query.flags ?? 0) & OPCODE_MASK) return;
    const snapshot = this.snapshot;
    const stale = this.o.clock.now() - snapshot.readAtMs > STALE_AFTER_MS;
    if (stale && !this.staleSaid) {
      this.staleSaid = true;
      this.o.log.error({ readAtMs: snapshot.readAtMs }, 'route answers: the routes have not been read for too long; no address is given until they are (every route answers 503)');
    }
    try {
      const reply = answerQuery(query, (name) => snapshot.byName.get(name));
      this.dns?.send(dnsPacket.encode(stale ? { ...reply, answers: [], flags: (reply.flags ?? 0) | RCODE_SERVFAIL } : reply), port, address);
    } catch (err) {
      // Closing, or a question that cannot be answered in the format: the asker times out.
      this.o.log.debug({ err }, 'route answers: a DNS question was not answered');
    }
  }

  private answerPage(req: IncomingMessage, res: ServerResponse): void {
    // Without the port, and without a trailing dot (`web.example.com.` names the same host).
    const host = (req.headers.host ?? '').toLowerCase().replace(/:\d+$/, '').replace(/\.$/, '');
    const target = this.snapshot.byHost.get(host);
    // A request with a body (never read here) ends its connection with the answer; one without
    // keeps it for Caddy's next error page.
    const withBody = (req.headers['content-length'] ?? '0') !== '0' || req.headers['transfer-encoding'] !== undefined;
    const text = (status: number, body: string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', ...(withBody ? { connection: 'close' } : {}), ...headers });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (!target) {
      text(404, NOT_FOUND_PAGE);
    } else if (target.status !== 'running') {
      text(503, `${target.label} is ${target.status}.\n`, { 'retry-after': '5' });
    } else {
      const status = Number(req.headers[ERROR_STATUS_HEADER]);
      const code = Number.isInteger(status) && status >= 500 && status <= 599 ? status : 502;
      text(code, `The service is not answering right now (${String(code)}). If it was just deployed, try again in a moment.\n`);
    }
  }
}
