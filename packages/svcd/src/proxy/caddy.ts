// The proxy: the only module that talks to Caddy. With --proxy-listen, svcd runs and supervises
// its own Caddy (admin API on a private unix socket in the data dir); with --caddy-admin it
// drives an operator's Caddy. Either way the whole configuration is built from the store and
// POSTed to /load when its hosts changed; a marker route tells whether a (restarted) Caddy still
// has it. Where each route's workload answers is not in it: Caddy asks svcd (route-answers.ts).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { connect } from 'node:tls';
import type { Logger } from 'pino';
import type { Clock, Timers, TimerHandle } from '../clock.js';
import { parseListen, type TlsConfig } from '../config.js';
import { buildCaddyConfig, type CaddyTls, type RouteAnswerAddresses, type RouteTarget } from './caddy-config.js';
import { RouteAnswers } from './route-answers.js';
import { CertificateErrors, type CertificateFailure } from './certificate-errors.js';
import { TlsAskServer, type CertificateOrderClaims } from './tls-ask.js';

export { buildCaddyConfig, joinUpstreams, routeId, splitUpstream, splitUpstreams, type RouteTarget } from './caddy-config.js';
export { ROUTE_FOLLOW_MS } from './route-answers.js';
export type { CertificateOrderClaims } from './tls-ask.js';

export interface ProxyOptions {
  /** Public listen address, e.g. 127.0.0.1:8081 (--proxy-listen). */
  listen: string;
  /** Operator Caddy admin URL (--caddy-admin); null: svcd runs its own Caddy. */
  adminUrl: string | null;
  /** Where svcd answers Caddy's questions (--proxy-answers-listen, route-answers.ts). */
  answersListen: { host: string; port: number };
  dataDir: string;
  /** The caddy binary. */
  caddyPath?: string;
  /** HTTPS with certificates on demand (--tls on), for the certified hosts (caddy-config.ts). */
  tls?: TlsConfig;
  /** With tls: one svcd at a time orders a name's certificate (tls-ask.ts). */
  certificateOrders?: CertificateOrderClaims;
}

/** A certificate the proxy serves for a name (unix seconds), or why it serves none. */
export type CertificateState = { validFrom: number; validTo: number } | CertificateFailure;
/**
 * How long a failed probe waits for Caddy's log line about the attempt: the handshake's end and
 * the line come on two pipes, in either order.
 */
const ERROR_LINE_WAIT_MS = 200;

/** How often the proxy checks that Caddy still has the current routes (a safety net). */
export const PROXY_CHECK_EVERY_MS = 5_000;
/** How long an admin request waits for Caddy. */
const ADMIN_TIMEOUT_MS = 10_000;
/** A Caddy left by a dead svcd answers its admin socket at once, or is not there. */
const LEFTOVER_PROBE_MS = 1_000;
/** How long a leftover Caddy is given to stop. */
const LEFTOVER_STOP_MS = 5_000;
/** How long a certificate probe waits for Caddy (which may be ordering the certificate meanwhile). */
const CERTIFICATE_PROBE_MS = 45_000;

/**
 * Caddy must not outlive its svcd: a killed svcd's Caddy would serve on with routes that no one
 * answers for (its route answers died with svcd), beside the next svcd's Caddy on the same port.
 * Node has no prctl(2), so util-linux's setpriv sets the parent-death signal and then executes
 * Caddy (the same process: its pid is Caddy's). The signal follows the thread that forked, which
 * is Node's main thread as long as Caddy is spawned from it (never from a worker thread). The
 * kernel clears it when Caddy gains privileges at exec (a caddy binary with file capabilities,
 * started by a non-root svcd), and a svcd killed between the fork and setpriv's prctl leaves
 * Caddy behind: there and where setpriv is missing or refuses the option (util-linux before
 * 2.33; tried once here), the next svcd on the data dir stops what is left (stopLeftover).
 */
function diesWithSvcd(): boolean {
  if (process.platform !== 'linux') return false;
  const tried = spawnSync('setpriv', ['--pdeathsig', 'KILL', '--', 'true'], { stdio: 'ignore', timeout: 5_000 });
  return tried.error === undefined && tried.status === 0;
}

export class CaddyProxy {
  private child: ChildProcess | null = null;
  /** Whether Caddy is started to die with svcd (diesWithSvcd: tried once, at the first start). */
  private diesWithSvcd: boolean | undefined;
  private closed = false;
  private lastMarker: string | null = null;
  private syncing: Promise<void> | null = null;
  private again = false;
  private checker: TimerHandle | null = null;
  private ask: TlsAskServer | null = null;
  /** Where each route's workload answers, and the pages of routes that do not (route-answers.ts). */
  private readonly answers: RouteAnswers;
  private answerAddresses: RouteAnswerAddresses | null = null;
  private tlsInput: CaddyTls | undefined = undefined;
  /** The hosts of the configuration Caddy took last (lower case): what the TLS question says yes to. */
  private pushedHosts: ReadonlySet<string> = new Set();
  /** The last error Caddy logged while obtaining each name's certificate. */
  private readonly certificateErrors: CertificateErrors;
  private readonly socketPath: string;
  /** Where admin requests go: the private socket, or the operator's admin host and port. */
  private readonly adminTarget: { socketPath: string } | { host: string; port: number };

  constructor(
    private readonly opts: ProxyOptions,
    /** The routes as the store has them now. */
    private readonly targets: () => Promise<RouteTarget[]>,
    private readonly clock: Clock,
    private readonly timers: Timers,
    private readonly log: Logger,
  ) {
    this.socketPath = join(opts.dataDir, 'caddy-admin.sock');
    this.certificateErrors = new CertificateErrors(clock);
    this.answers = new RouteAnswers({ listen: opts.answersListen, targets, clock, timers, log });
    if (opts.adminUrl === null) {
      this.adminTarget = { socketPath: this.socketPath };
    } else {
      const url = new URL(opts.adminUrl);
      this.adminTarget = { host: url.hostname, port: Number(url.port || 2019) };
    }
  }

  async start(): Promise<void> {
    try {
      await this.startParts();
    } catch (err) {
      // What did start (the answers' listeners, the TLS question, Caddy) does not outlive the failure.
      await this.close().catch(() => {});
      throw err;
    }
  }

  private async startParts(): Promise<void> {
    this.answerAddresses = await this.answers.start();
    const tls = this.opts.tls;
    if (tls) {
      // Certificates and the ACME account in the data dir (or the shared --tls-storage): a restart
      // orders nothing again.
      const storageDir = tls.storageDir ?? join(this.opts.dataDir, 'caddy-tls');
      const claims = this.opts.certificateOrders;
      if (!claims) throw new Error('--tls on needs the certificate order claims');
      this.ask = new TlsAskServer(tls.askListen, { routedHosts: () => this.pushedHosts, storageDir, claims, clock: this.clock, timers: this.timers, log: this.log });
      const askUrl = await this.ask.start();
      this.tlsInput = { httpsListen: tls.httpsListen, askUrl, acme: tls.acme, storageDir };
    }
    if (this.opts.adminUrl === null) await this.spawnCaddy();
    await this.sync();
    this.checker = this.timers.setInterval(() => void this.check(), PROXY_CHECK_EVERY_MS);
  }

  /** Pushes the routes if they changed; calls that arrive during a push are folded into one more. */
  sync(): Promise<void> {
    if (this.syncing) {
      this.again = true;
      return this.syncing;
    }
    this.syncing = (async () => {
      try {
        do {
          this.again = false;
          await this.push(false);
          // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by a sync() during the push
        } while (this.again);
      } finally {
        this.syncing = null;
      }
    })();
    return this.syncing;
  }

  /**
   * The safety net, every few seconds: rebuilds the routes from the store (another svcd on the
   * same store may have changed them) and pushes them if they changed, then re-pushes when Caddy
   * lost the configuration (restarted, or changed by someone else).
   */
  async check(): Promise<void> {
    try {
      await this.sync();
      if (this.lastMarker && (await this.admin('GET', `/id/${this.lastMarker}`)).status === 200) return;
      await this.push(true);
    } catch (err) {
      this.log.warn({ err }, 'proxy check failed');
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.checker?.cancel();
    await this.syncing?.catch(() => {});
    // One that exited already (a failed start) is not waited for.
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((r) => this.child?.once('exit', r));
      this.child.kill('SIGTERM');
      await exited;
    }
    await this.ask?.close();
    await this.answers.close();
  }

  /** The supervised Caddy's process id (tests kill it). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  private async push(force: boolean): Promise<void> {
    const answers = this.answerAddresses;
    if (!answers) throw new Error('the proxy is not started');
    const began = this.answers.beginRead();
    const targets = await this.targets();
    // Where workloads answer now: Caddy asks for it on its next request, without a load.
    this.answers.update(targets, began);
    const { config, marker } = buildCaddyConfig({ adminListen: this.adminListen(), listen: this.opts.listen, targets, answers, ...(this.tlsInput ? { tls: this.tlsInput } : {}) });
    if (!force && marker === this.lastMarker) return;
    const r = await this.admin('POST', '/load', JSON.stringify(config));
    if (r.status !== 200) throw new Error(`caddy refused the configuration (${r.status}): ${r.body}`);
    this.lastMarker = marker;
    this.pushedHosts = new Set(targets.flatMap((t) => t.hosts.map((h) => h.toLowerCase())));
  }

  /**
   * The certificate Caddy serves for `hostname` over HTTPS, found by a TLS handshake with that
   * name, as a client's would be: a first one makes Caddy obtain it (when the TLS question says
   * yes). Its absence is explained by Caddy's last error for the name, when it logged one.
   */
  certificateOf(hostname: string, timeoutMs = CERTIFICATE_PROBE_MS): Promise<CertificateState> {
    const tls = this.opts.tls;
    if (!tls) return Promise.resolve({ error: 'the proxy serves no HTTPS (--tls off)', fromIssuer: false });
    const { host, port } = parseListen(tls.httpsListen);
    const dialHost = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '::1' : host;
    const since = this.clock.now();
    return new Promise((resolve) => {
      const done = (state: CertificateState) => {
        socket.destroy();
        resolve(state);
      };
      const failed = (why: string) => {
        socket.destroy();
        // A wait on Caddy's pipe, not svc's pacing: Node's timer, as the socket's own timeout.
        setTimeout(() => resolve(this.certificateErrors.explain(hostname, since, why)), ERROR_LINE_WAIT_MS);
      };
      // Not verified against a root here: which certificate is served is the question.
      const socket = connect({ host: dialHost, port, servername: hostname, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'], timeout: timeoutMs });
      socket.once('secureConnect', () => {
        const cert = socket.getPeerCertificate();
        const names = (cert.subjectaltname ?? '').split(', ');
        if (!names.includes(`DNS:${hostname}`)) {
          failed(`the proxy served a certificate for other names (${cert.subjectaltname ?? 'none'})`);
          return;
        }
        this.certificateErrors.forget(hostname);
        done({ validFrom: Math.floor(Date.parse(cert.valid_from) / 1000), validTo: Math.floor(Date.parse(cert.valid_to) / 1000) });
      });
      socket.once('timeout', () => failed('the proxy did not answer the TLS handshake in time'));
      socket.once('error', (err: Error) => failed(`no certificate was served (${err.message})`));
    });
  }

  private adminListen(): string {
    if (this.opts.adminUrl === null) return `unix/${this.socketPath}`;
    return new URL(this.opts.adminUrl).host;
  }

  private async spawnCaddy(): Promise<void> {
    await this.stopLeftover();
    rmSync(this.socketPath, { force: true });
    // The bootstrap file only places the admin API on a private socket; every route reaches
    // Caddy through that API. (Not stdin: Node's stdio pipes are socket pairs, which Caddy
    // cannot open as /dev/stdin.)
    const bootstrap = join(this.opts.dataDir, 'caddy-bootstrap.json');
    writeFileSync(bootstrap, JSON.stringify({ admin: { listen: `unix/${this.socketPath}`, config: { persist: false } } }), { mode: 0o600 });
    const caddy = [this.opts.caddyPath ?? 'caddy', 'run', '--config', bootstrap];
    this.diesWithSvcd ??= diesWithSvcd();
    if (!this.diesWithSvcd) this.log.warn('setpriv --pdeathsig (util-linux) is missing or refused: Caddy outlives a killed svcd, until the next svcd on this data dir stops it');
    const [command = 'caddy', ...args] = this.diesWithSvcd ? ['setpriv', '--pdeathsig', 'KILL', '--', ...caddy] : caddy;
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    // Caddy logs JSON lines: the last few are kept for a failed start, and certificate errors are
    // kept by name for the domains' status (certificateOf).
    createInterface({ input: child.stderr }).on('line', (line) => {
      stderr = (stderr + line + '\n').slice(-4000);
      this.certificateErrors.note(line);
    });
    this.child = child;
    child.once('exit', (code, signal) => {
      if (this.closed || this.child !== child) return;
      this.log.warn({ code, signal, stderr: stderr.slice(-500) }, 'caddy exited; restarting it');
      this.child = null;
      this.lastMarker = null;
      this.timers.setTimeout(() => void this.restart(), 500);
    });
    // Real time, as every wait on another process's start here: the injected clock is svcd's
    // time for its records, and a test's clock held still would never end this one.
    const until = Date.now() + 10_000;
    for (;;) {
      try {
        if ((await this.admin('GET', '/config/')).status === 200) return;
      } catch {
        // not listening yet
      }
      if (child.exitCode !== null || Date.now() > until) throw new Error(`caddy did not start: ${stderr.slice(-500)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * A Caddy still answering on this data dir's admin socket was left by a svcd that died without
   * taking it along (diesWithSvcd): it would serve on beside the new one (Caddy's listeners share
   * their port, SO_REUSEPORT, and the kernel splits connections between them) with routes no svcd
   * answers for. It is told to stop, and given a few seconds; svcd starts its own either way.
   */
  private async stopLeftover(): Promise<void> {
    // Present while the socket gets an HTTP answer. (A leftover may die of the question itself:
    // its log's pipe led to the dead svcd, and its first log line ends it.)
    const present = () => this.admin('GET', '/config/', undefined, LEFTOVER_PROBE_MS).then(() => true, () => false);
    if (!existsSync(this.socketPath) || !(await present())) return;
    this.log.warn('stopping a Caddy that a previous svcd on this data dir left running');
    await this.admin('POST', '/stop', undefined, LEFTOVER_PROBE_MS).catch(() => {});
    const until = Date.now() + LEFTOVER_STOP_MS;
    while (await present()) {
      if (Date.now() > until) {
        this.log.error({ socket: this.socketPath }, 'a Caddy left running on this data dir did not stop: it shares the proxy port with the new one until it is stopped');
        return;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  private async restart(): Promise<void> {
    if (this.closed) return;
    try {
      await this.spawnCaddy();
      await this.push(true);
    } catch (err) {
      this.log.error({ err }, 'caddy restart failed');
      this.timers.setTimeout(() => void this.restart(), 2_000);
    }
  }

  private admin(method: string, path: string, body?: string, timeoutMs = ADMIN_TIMEOUT_MS): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          ...this.adminTarget,
          path,
          method,
          // Caddy checks the Host of admin requests; on its unix socket it accepts only an empty one.
          setHost: this.opts.adminUrl !== null,
          headers: {
            ...(this.opts.adminUrl === null ? { host: '' } : {}),
            ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}),
          },
          timeout: timeoutMs,
        },
        (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('caddy admin API timed out')));
      req.on('error', reject);
      req.end(body);
    });
  }
}
