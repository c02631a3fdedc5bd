// A workload driver with no engine behind it, that keeps the driver port's contract
// (test/driver-conformance.ts holds it and the Docker driver to the same cases). Domain and
// controller rules (deploys, cancels, crashes, take-overs, quotas) can be tested with it in
// milliseconds instead of container starts.
//
// What it runs is described per image (MemoryImage), and what can be real is: a workload that
// serves listens on its spec's port at an address of its own in 127.0.0.0/8 (loopback on Linux
// answers the whole block), so readiness probes, the proxy and a test's requests reach a real
// socket, and one workload's address is not another's.
import { createServer, type Server } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import { systemClock, systemTimers, type Clock, type Timers } from '../../clock.js';
import type {
  Applied,
  ApplyRequest,
  DriverCapabilities,
  Endpoint,
  ExecOutcome,
  ExecSpec,
  LogOptions,
  WorkloadDriver,
  WorkloadExit,
  WorkloadInfo,
  WorkloadKind,
  WorkloadSpec,
  WorkloadStats,
} from '../driver.js';
import { LABELS, WorkloadNotRunningError, onWarmPoolNetwork, workloadLabels } from '../port.js';
import { applyInOrder } from '../apply-sequence.js';

/** How long a workload under a restart policy (engineRestarts) waits between an exit and its next start. */
const RESTART_DELAY_MS = 100;

/** How an image behaves when it runs. */
export interface MemoryImage {
  /** Accepts TCP on the spec's port once started (after `startsAfterMs`). */
  serves?: boolean;
  /** Takes this long to listen. */
  startsAfterMs?: number;
  /**
   * The HTTP status it answers for a path (a health route), once it has read the request line;
   * without it, every connection gets a 200 at once, whatever it sends.
   */
  statusFor?: (path: string) => number;
  /** Answers every connection with a status line, then a header a byte every 200 ms, never finishing it. */
  trickles?: boolean;
  /** Exits on its own this long after its start, with `exitCode`. */
  exitsAfterMs?: number;
  exitCode?: number;
  /** What it prints when it starts. */
  output?: string;
  /** What an exec runs: argv in, outcome out. Without it, exec knows `true`, `false` and `echo`. */
  exec?: (argv: string[]) => { exitCode: number; stdout?: string; stderr?: string };
}

export interface MemoryDriverOptions {
  /** Images the "engine" has. */
  images: Record<string, MemoryImage>;
  /** Images a pull can fetch (added to `images` when pulled); any other pull fails. */
  registry?: Record<string, MemoryImage>;
  /** Labels workloads like the Docker driver's installation label, so lists can be scoped. */
  installation?: string;
  clock?: Clock;
  timers?: Timers;
}

interface MemoryWorkload {
  id: string;
  spec: WorkloadSpec;
  image: MemoryImage;
  labels: Record<string, string>;
  state: 'running' | 'restarting' | 'exited';
  exitCode: number | null;
  finishedAtMs: number | null;
  address: string;
  /** The tenant whose network it is on (null: the warm pool's). */
  network: string | null;
  server: Server | null;
  /** The host port it publishes (spec.publish), bound from its start to its removal. */
  published: Server | null;
  /** Stopped by stop() or remove(): an engine restart policy does not bring it back. */
  stoppedBySvc: boolean;
  output: string;
  followers: Set<PassThrough>;
  /** Its pending behaviour (listening later, exiting later): cancelled when it ends. */
  timers: Array<{ cancel(): void }>;
  startedAtMs: number;
}

export class MemoryDriver implements WorkloadDriver {
  private readonly images: Map<string, MemoryImage>;
  private readonly registry: Map<string, MemoryImage>;
  private readonly workloads = new Map<string, MemoryWorkload>();
  private readonly volumes = new Set<string>();
  private readonly tenants = new Set<string>();
  private readonly exitListeners = new Set<(e: WorkloadExit) => void>();
  private readonly installation: string;
  private readonly clock: Clock;
  private readonly timers: Timers;
  private nextId = 1;
  /**
   * Each driver instance takes its addresses from a random place of 127.64.0.0-127.191.255.255
   * (a /16 and a /24 in it, counting on from there): two drivers of one test, or of test files
   * running at once, would clash on an address in 1 of 32,000 runs (a /16 alone: 1 in 128).
   */
  private readonly subnet = 64 + Math.floor(Math.random() * 128);
  private readonly firstBlock = Math.floor(Math.random() * 250);

  constructor(o: MemoryDriverOptions) {
    this.images = new Map(Object.entries(o.images));
    this.registry = new Map(Object.entries(o.registry ?? {}));
    this.installation = o.installation ?? 'memory';
    this.clock = o.clock ?? systemClock;
    this.timers = o.timers ?? systemTimers;
  }

  capabilities(): Promise<DriverCapabilities> {
    // No agent: its exec is the driver's own.
    return Promise.resolve({ sandbox: false, warmPool: true, agent: false, addressable: true, allocatedPorts: false, setAside: true, replicas: false });
  }

  /** The steps of apply in their one order (apply-sequence.ts), in memory. */
  apply(request: ApplyRequest): Promise<Applied> {
    return applyInOrder(request, {
      clock: this.clock,
      timers: this.timers,
      ensureNetwork: (spec) => {
        if (!onWarmPoolNetwork(spec)) this.tenants.add(spec.tenantId);
        return Promise.resolve();
      },
      hasImage: (image) => this.hasImage(image),
      pullImage: (image) => this.pullImage(image),
      remove: (ref) => this.remove(ref),
      rename: (ref, name) => {
        const w = this.find(ref);
        if (!w) return Promise.reject(new Error(`No such container: ${ref}`));
        // As the engine's rename: the same workload, running on, under another name.
        w.spec = { ...w.spec, name };
        return Promise.resolve();
      },
      run: (spec) => {
        const image = this.images.get(spec.image);
        // As the engine answers a create of an image it does not have.
        if (!image) return Promise.reject(new Error(`No such image: ${spec.image}`));
        return this.run(spec, image).then((w) => w.id);
      },
      inspect: (ref) => this.inspect(ref),
      logTail: (ref) => Promise.resolve(this.find(ref)?.output.trim().split('\n').slice(-5).join(' | ') ?? ''),
    });
  }

  start(ref: string): Promise<Endpoint | null> {
    const w = this.find(ref);
    if (!w) return Promise.reject(new Error(`No such container: ${ref}`));
    w.stoppedBySvc = false;
    if (w.state === 'exited') this.boot(w);
    return Promise.resolve({ host: w.address, port: w.spec.port ?? null });
  }

  async stop(ref: string): Promise<void> {
    const w = this.find(ref);
    if (!w) return;
    w.stoppedBySvc = true;
    // SIGTERM, which every memory workload honours with 143.
    await this.exit(w, 143);
  }

  async remove(ref: string): Promise<void> {
    const w = this.find(ref);
    if (!w) return;
    w.stoppedBySvc = true;
    await this.exit(w, 137);
    const published = w.published;
    w.published = null;
    if (published) await new Promise<void>((resolve) => published.close(() => resolve()));
    this.workloads.delete(w.id);
  }

  removeVolume(name: string): Promise<void> {
    this.volumes.delete(name);
    return Promise.resolve();
  }

  releaseTenant(tenantId: string): Promise<boolean> {
    // Like an engine's network: in use while a workload runs on it; removed once (false after).
    if ([...this.workloads.values()].some((w) => w.network === tenantId && w.state !== 'exited')) return Promise.resolve(false);
    return Promise.resolve(this.tenants.delete(tenantId));
  }

  inspect(ref: string): Promise<WorkloadInfo | null> {
    const w = this.find(ref);
    return Promise.resolve(w ? this.info(w) : null);
  }

  list(filter: { tenantId?: string; kind?: WorkloadKind } = {}): Promise<WorkloadInfo[]> {
    const all = [...this.workloads.values()].filter(
      (w) => (!filter.tenantId || w.labels[LABELS.tenant] === filter.tenantId) && (!filter.kind || w.spec.kind === filter.kind),
    );
    return Promise.resolve(all.map((w) => this.info(w)));
  }

  async *events(signal: AbortSignal): AsyncIterable<WorkloadExit> {
    const queue: WorkloadExit[] = [];
    let wake: (() => void) | null = null;
    const listener = (e: WorkloadExit) => {
      queue.push(e);
      wake?.();
    };
    this.exitListeners.add(listener);
    const onAbort = () => wake?.();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!signal.aborted) {
        const next = queue.shift();
        if (next) {
          yield next;
          continue;
        }
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
      }
    } finally {
      this.exitListeners.delete(listener);
      signal.removeEventListener('abort', onAbort);
    }
  }

  exec(ref: string, spec: ExecSpec): Promise<ExecOutcome> {
    const w = this.find(ref);
    if (w?.state !== 'running') return Promise.reject(new WorkloadNotRunningError(`container ${ref} is not running`));
    const run = w.image.exec ?? defaultExec;
    const out = run(spec.cmd);
    const cap = (text: string) => text.slice(0, spec.maxOutputBytes);
    const stdout = out.stdout ?? '';
    const stderr = out.stderr ?? '';
    return Promise.resolve({
      exitCode: out.exitCode,
      stdout: cap(stdout),
      stderr: cap(stderr),
      truncated: stdout.length > spec.maxOutputBytes || stderr.length > spec.maxOutputBytes,
      timedOut: false,
      durationMs: 0,
    });
  }

  logs(ref: string, opts: LogOptions): Promise<NodeJS.ReadableStream> {
    const w = this.find(ref);
    if (!w) return Promise.reject(new WorkloadNotRunningError(`No such container: ${ref}`));
    const lines = w.output.split(/(?<=\n)/).filter((l) => l !== '');
    const tail = lines.slice(Math.max(0, lines.length - opts.tail)).join('');
    if (!opts.follow || w.state !== 'running') return Promise.resolve(Readable.from(tail === '' ? [] : [tail]));
    const stream = new PassThrough();
    if (tail !== '') stream.write(tail);
    w.followers.add(stream);
    stream.on('close', () => w.followers.delete(stream));
    return Promise.resolve(stream);
  }

  stats(ref: string): Promise<WorkloadStats | null> {
    const w = this.find(ref);
    if (w?.state !== 'running') return Promise.resolve(null);
    const upMs = this.clock.now() - w.startedAtMs;
    return Promise.resolve({ cpuMicros: upMs, memoryBytes: 8 * 1024 * 1024, netRxBytes: 0, netTxBytes: 0, blockReadBytes: 0, blockWriteBytes: 0 });
  }

  assign(ref: string, tenantId: string): Promise<string | null> {
    const w = this.find(ref);
    if (!w) return Promise.reject(new Error(`No such container: ${ref}`));
    this.tenants.add(tenantId);
    w.network = tenantId;
    return Promise.resolve(w.address);
  }

  /** Removes every workload (their listeners and timers with them): the end of a test. */
  async close(): Promise<void> {
    for (const w of [...this.workloads.values()]) await this.remove(w.id);
  }

  /** Whether the "engine" has the image (under its name, which is also its ID here). */
  hasImage(image: string): Promise<boolean> {
    return Promise.resolve(this.images.has(image));
  }

  imageId(image: string): Promise<string | null> {
    return Promise.resolve(this.images.has(image) ? image : null);
  }

  /** Fetches an image of the registry; rejects for any other, as a registry would. */
  pullImage(image: string): Promise<void> {
    const pulled = this.registry.get(image);
    if (!pulled) return Promise.reject(new Error(`pull access denied for ${image}: repository does not exist`));
    this.images.set(image, pulled);
    return Promise.resolve();
  }

  /** Tests: the tenant whose network a workload is on (null: the warm pool's; undefined: no such workload). */
  networkOf(ref: string): string | null | undefined {
    return this.find(ref)?.network;
  }

  /** Named volumes that exist (created by an apply that mounts them, gone by removeVolume). */
  volumeNames(): string[] {
    return [...this.volumes];
  }

  private find(ref: string): MemoryWorkload | undefined {
    return this.workloads.get(ref) ?? [...this.workloads.values()].find((w) => w.spec.name === ref);
  }

  private async run(spec: WorkloadSpec, image: MemoryImage): Promise<MemoryWorkload> {
    // As the engine: one container per name (two applies of one name at once: one of them fails).
    if ([...this.workloads.values()].some((x) => x.spec.name === spec.name)) {
      throw new Error(`Conflict. The container name "/${spec.name}" is already in use`);
    }
    for (const v of spec.volumes ?? []) this.volumes.add(v.name);
    const id = `mem${String(this.nextId++).padStart(12, '0')}`;
    const w: MemoryWorkload = {
      id,
      spec,
      image,
      labels: workloadLabels(spec, this.installation),
      state: 'running',
      exitCode: null,
      finishedAtMs: null,
      address: `127.${this.subnet}.${(this.firstBlock + Math.floor(this.nextId / 250)) % 250}.${(this.nextId % 250) + 2}`,
      network: onWarmPoolNetwork(spec) ? null : spec.tenantId,
      server: null,
      published: null,
      stoppedBySvc: false,
      output: '',
      followers: new Set(),
      timers: [],
      startedAtMs: this.clock.now(),
    };
    this.workloads.set(id, w);
    if (spec.publish && spec.port) {
      try {
        w.published = await this.publish(w, spec.publish);
      } catch (err) {
        this.workloads.delete(id);
        throw err;
      }
    }
    this.boot(w);
    return w;
  }

  /**
   * Binds the published host port, as the engine's proxy does: taken already, the start fails
   * with the engine's words; a connection is passed on once the workload serves, else dropped.
   */
  private publish(w: MemoryWorkload, at: { address: string; port: number }): Promise<Server> {
    const server = createServer((socket) => {
      socket.on('error', () => {});
      if (w.state === 'running' && w.server) socket.end('HTTP/1.0 200 OK\r\n\r\nok\n');
      else socket.destroy();
    });
    return new Promise((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) =>
        reject(err.code === 'EADDRINUSE' ? new Error(`Bind for ${at.address}:${at.port} failed: port is already allocated`) : err),
      );
      server.listen(at.port, at.address, () => resolve(server));
    });
  }

  /** Starts (or starts again) a workload's behaviour. */
  private boot(w: MemoryWorkload): void {
    w.state = 'running';
    w.exitCode = null;
    w.startedAtMs = this.clock.now();
    if (w.image.output) this.print(w, w.image.output);
    const port = w.spec.port;
    if (w.image.serves && port) {
      const listen = () => {
        if (w.state !== 'running' || w.server) return;
        const { statusFor, trickles } = w.image;
        const server = createServer((socket) => {
          // A probe hangs up at once: its reset is no error of the workload's.
          socket.on('error', () => {});
          if (trickles) {
            socket.write('HTTP/1.1 200 OK\r\nX-Slow: ');
            const drip = this.timers.setInterval(() => socket.write('a'), 200);
            socket.on('close', () => drip.cancel());
            return;
          }
          if (!statusFor) {
            socket.end('HTTP/1.0 200 OK\r\n\r\nok\n');
            return;
          }
          let head = '';
          const answer = (chunk: Buffer) => {
            head = (head + chunk.toString('latin1')).slice(0, 8_192);
            const line = /^[A-Z]+ (\S+) HTTP\/1\.[01]\r\n/.exec(head);
            if (!line) return;
            socket.off('data', answer);
            const status = statusFor(line[1] ?? '/');
            // A redirect names a page: a client that followed it would meet that page's answer.
            const location = status >= 300 && status < 400 ? 'Location: /nowhere\r\n' : '';
            socket.end(`HTTP/1.0 ${String(status)} Answer\r\n${location}\r\n`);
          };
          socket.on('data', answer);
        });
        // A clash with something else on loopback is the same as a workload that never listens.
        server.once('error', () => (w.server = null));
        server.listen(port, w.address);
        w.server = server;
      };
      if (w.image.startsAfterMs) w.timers.push(this.timers.setTimeout(listen, w.image.startsAfterMs));
      else listen();
    }
    if (w.image.exitsAfterMs !== undefined) {
      const code = w.image.exitCode ?? 0;
      w.timers.push(this.timers.setTimeout(() => void this.exit(w, code), w.image.exitsAfterMs));
    }
  }

  private async exit(w: MemoryWorkload, code: number): Promise<void> {
    if (w.state === 'exited') return;
    const wasRunning = w.state === 'running';
    // An exit of its own under a restart policy: restarting, and running again a moment later.
    const restarts = w.spec.engineRestarts === true && !w.stoppedBySvc;
    w.state = restarts ? 'restarting' : 'exited';
    w.exitCode = code;
    w.finishedAtMs = this.clock.now();
    for (const timer of w.timers.splice(0)) timer.cancel();
    const server = w.server;
    w.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    for (const f of w.followers) f.end();
    if (wasRunning) for (const listener of this.exitListeners) listener({ id: w.id, labels: { ...w.labels, name: w.spec.name }, exitCode: code });
    if (restarts) {
      w.timers.push(
        this.timers.setTimeout(() => {
          if (w.state === 'restarting' && this.workloads.has(w.id)) this.boot(w);
        }, RESTART_DELAY_MS),
      );
    }
  }

  private print(w: MemoryWorkload, text: string): void {
    w.output += text.endsWith('\n') ? text : `${text}\n`;
    for (const f of w.followers) f.write(text);
  }

  private info(w: MemoryWorkload): WorkloadInfo {
    return {
      id: w.id,
      name: w.spec.name,
      state: w.state,
      exitCode: w.state === 'exited' ? w.exitCode : null,
      labels: w.labels,
      address: w.state === 'running' ? { host: w.address, port: w.spec.port ?? 0 } : null,
      finishedAtMs: w.finishedAtMs,
    };
  }
}

/** The few commands every memory workload knows. */
function defaultExec(argv: string[]): { exitCode: number; stdout?: string; stderr?: string } {
  switch (argv[0]) {
    case 'true':
      return { exitCode: 0 };
    case 'false':
      return { exitCode: 1 };
    case 'echo':
      return { exitCode: 0, stdout: `${argv.slice(1).join(' ')}\n` };
    default:
      return { exitCode: 127, stdout: `${argv[0] ?? ''}: not found\n` };
  }
}
