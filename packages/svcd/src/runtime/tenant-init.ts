// svc-init (packages/svc-init, Go) as PID 1 of the workloads that run a tenant's own code:
// services and environments. It runs the image's command, forwards signals, reaps orphans, and
// holds the container's output to a rate before the engine copies it into the log: the engine's
// copy of a flood runs outside every tenant's CPU group (README, Resource safety, "A log flood").
//
// The binary is copied from where `make build` leaves it into the data dir under a name of its
// content's hash, and bind-mounted read-only from there: a rebuild never changes the file under
// running containers, and svcd is on the engine's host (as for the firewall and the CPU groups).
import { createHash } from 'node:crypto';
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The directory svc-init is in, in the container (a Swarm task mounts its node's svc-init volume here). */
export const TENANT_INIT_DIR = '/.svc';
/** Where svc-init is mounted in the container (one engine: a bind mount of the file). */
export const TENANT_INIT_PATH = `${TENANT_INIT_DIR}/init`;

/** How much output a tenant container's log takes (both streams together); svc-init drops the rest. */
export interface LogRate {
  linesPerSecond: number;
  bytesPerSecond: number;
}

export const DEFAULT_LOG_RATE: LogRate = { linesPerSecond: 500, bytesPerSecond: 512 * 1024 };

export interface TenantInit {
  /** The binary on the engine's host. */
  binary: string;
  rate: LogRate;
}

/** What the image says to run, as the engine reads it (Config.Entrypoint, Config.Cmd), and how it is stopped (Config.StopSignal). */
export interface ImageCommand {
  entrypoint: string[] | null;
  cmd: string[] | null;
  /** The signal a stop sends (STOPSIGNAL) as the image names it; none: SIGTERM. */
  stopSignal?: string | null;
}

/** moby's SIGRTMIN and SIGRTMAX. */
const RTMIN = 34;
const LAST_REAL_TIME = 64;
/** What svc-init's --forward-signal takes: Go delivers no 32 to 34 to a program without cgo. */
const FIRST_FORWARDABLE_REAL_TIME = 35;
/** SIGTERM: the engine's stop when an image names none, which svc-init always asks for first. */
const SIGTERM = 15;
/**
 * The standard signals svc-init forwards, by moby's names (Linux's numbers): every one a program
 * can catch but SIGCHLD, SIGPIPE, SIGURG and SIGPROF (svc-init's main.go).
 */
const FORWARDED_STANDARD_SIGNALS: Readonly<Record<string, number>> = {
  HUP: 1, INT: 2, QUIT: 3, ILL: 4, TRAP: 5, ABRT: 6, IOT: 6, BUS: 7, FPE: 8, USR1: 10, SEGV: 11, USR2: 12, ALRM: 14, TERM: 15,
  STKFLT: 16, CONT: 18, TSTP: 20, TTIN: 21, TTOU: 22, XCPU: 24, XFSZ: 25, VTALRM: 26, WINCH: 28, IO: 29, POLL: 29, PWR: 30, SYS: 31,
};
const FORWARDED_STANDARD_NUMBERS = new Set(Object.values(FORWARDED_STANDARD_SIGNALS));

/**
 * The number of an image's STOPSIGNAL, which svc-init is told (--forward-signal) so that it asks
 * Go for it before the command starts: it asks for some standard signals only once the command
 * runs (haproxy's SIGUSR1 among them), and forwards a real-time one only when told (README,
 * Resource safety). Null for none and SIGTERM (always asked for first), for a signal svc-init does
 * not forward (SIGKILL, SIGSTOP: the engine's own; SIGCHLD, SIGPIPE...), and for SIGRTMIN itself
 * (34), which Go cannot deliver (such a stop ends with the engine's kill, as it did before). Read
 * as the engine reads it (moby's names, RTMIN+1 to +15 and RTMAX-14 to -1 among them, with or
 * without SIG, in any case; or a number).
 */
export function forwardedStopSignal(stopSignal: string | null | undefined): number | null {
  const name = (stopSignal ?? '').trim().toUpperCase().replace(/^SIG/, '');
  let n: number | null = null;
  if (/^\d{1,3}$/.test(name)) n = Number(name);
  else if (Object.hasOwn(FORWARDED_STANDARD_SIGNALS, name)) n = FORWARDED_STANDARD_SIGNALS[name] ?? null;
  else if (name === 'RTMIN') n = RTMIN;
  else if (name === 'RTMAX') n = LAST_REAL_TIME;
  else {
    const plus = /^RTMIN\+(\d{1,2})$/.exec(name)?.[1];
    const minus = /^RTMAX-(\d{1,2})$/.exec(name)?.[1];
    if (plus !== undefined && Number(plus) >= 1 && Number(plus) <= 15) n = RTMIN + Number(plus);
    if (minus !== undefined && Number(minus) >= 1 && Number(minus) <= 14) n = LAST_REAL_TIME - Number(minus);
  }
  if (n === null || n === SIGTERM) return null;
  return FORWARDED_STANDARD_NUMBERS.has(n) || (n >= FIRST_FORWARDABLE_REAL_TIME && n <= LAST_REAL_TIME) ? n : null;
}

/**
 * The argv the engine would run for a container created with these overrides, by the engine's
 * own rule (moby's merge of a container's config with its image's): an ENTRYPOINT given drops
 * the image's CMD; an empty ENTRYPOINT ([]) means none, with the image's CMD unless one is given.
 */
export function resolveCommand(image: ImageCommand, entrypoint: string[] | undefined, cmd: string[] | undefined): string[] {
  if (entrypoint !== undefined && entrypoint.length > 0) return [...entrypoint, ...(cmd ?? [])];
  const args = cmd !== undefined && cmd.length > 0 ? cmd : (image.cmd ?? []);
  return [...(entrypoint ?? image.entrypoint ?? []), ...args];
}

/**
 * Inits that run only as PID 1 (s6-overlay's /init refuses anything else, systemd and runit
 * likewise): an image that starts one runs as it is, without svc-init, and its log is not held
 * to the rate (README, Resource safety).
 */
const PID1_ONLY = new Set(['/init', '/sbin/init', '/lib/systemd/systemd', '/usr/lib/systemd/systemd', '/sbin/runit', '/sbin/runit-init', '/usr/bin/s6-svscan', '/command/s6-svscan']);

export function runsOnlyAsPid1(argv: string[]): boolean {
  return argv[0] !== undefined && PID1_ONLY.has(argv[0]);
}

export interface UnderTenantInitOptions {
  /** Serve svc-init's agent on this port. */
  agentPort?: number;
  /** Where svc-init is in the container (default TENANT_INIT_PATH). */
  initPath?: string;
  /** The image's STOPSIGNAL, for svc-init to ask for before the command starts (forwardedStopSignal). */
  forwardSignal?: number | null;
}

/** The container's ENTRYPOINT and CMD that run `argv` under svc-init. */
export function underTenantInit(argv: string[], rate: LogRate, o: UnderTenantInitOptions = {}): { entrypoint: string[]; cmd: string[] } {
  return {
    entrypoint: [
      o.initPath ?? TENANT_INIT_PATH,
      `--lines-per-second=${rate.linesPerSecond}`,
      `--bytes-per-second=${rate.bytesPerSecond}`,
      ...(o.agentPort === undefined ? [] : [`--agent-port=${o.agentPort}`]),
      ...(o.forwardSignal == null ? [] : [`--forward-signal=${o.forwardSignal}`]),
      '--',
    ],
    cmd: argv,
  };
}

/**
 * The ENTRYPOINT and CMD to create a tenant-code workload with (every driver): the image's own
 * command (or the spec's overrides) behind svc-init; an init that runs only as PID 1 through
 * svc-init's --exec, which only sets no-new-privileges before it becomes that init. Throws, as
 * the engine would, for an image that names no command.
 */
export function tenantCommand(image: ImageCommand, spec: { entrypoint?: string[]; cmd?: string[]; agentPort?: number }, rate: LogRate, initPath = TENANT_INIT_PATH): { entrypoint: string[]; cmd: string[] } {
  const argv = resolveCommand(image, spec.entrypoint, spec.cmd);
  // The engine's own refusal, before a container exists (svc-init would start and exit 127).
  if (argv.length === 0) throw new Error('no command specified: the image names neither an ENTRYPOINT nor a CMD');
  // svc-init sets no-new-privileges and becomes the image's init (a Swarm task gets the flag from
  // nowhere else); the output is then not held, nor orphans reaped by svc-init.
  if (runsOnlyAsPid1(argv)) return withoutPrivilegeGain(argv, initPath);
  return underTenantInit(argv, rate, { agentPort: spec.agentPort, initPath, forwardSignal: forwardedStopSignal(image.stopSignal) });
}

/**
 * The ENTRYPOINT and CMD that run `argv` as it is, as PID 1, after svc-init's --exec has set
 * no-new-privileges: for an init that must be PID 1, and on a swarm for svc's own workloads
 * (databases, boards), whose spec cannot ask the engine for the flag (Engine 20.10) and whose
 * process a tenant reaches too (a database's superuser runs programs with COPY ... PROGRAM).
 */
export function withoutPrivilegeGain(argv: string[], initPath = TENANT_INIT_PATH): { entrypoint: string[]; cmd: string[] } {
  if (argv.length === 0) throw new Error('no command specified: the image names neither an ENTRYPOINT nor a CMD');
  return { entrypoint: [initPath, '--exec', '--'], cmd: argv };
}

/** The binary built by `make build`, next to svcd's own package (src/ and dist/ alike). */
export function builtTenantInit(): string {
  return fileURLToPath(new URL('../../../svc-init/dist/svc-init', import.meta.url));
}

export class TenantInitMissingError extends Error {}

/**
 * Copies the binary into `<dataDir>/svc-init/<hash>` and answers that path, absolute (the engine
 * refuses a relative bind mount). A file already there is used only when its content is the
 * same; a new one is written to a temporary name first, so that a crash leaves no half-written
 * binary under the final name.
 */
export async function installTenantInit(source: string, dataDir: string): Promise<string> {
  let content: Buffer;
  try {
    content = await readFile(source);
  } catch (err) {
    throw new TenantInitMissingError(`svc-init is missing at ${source} (${(err as Error).message}): make build builds it with Go`);
  }
  const dir = join(resolve(dataDir), 'svc-init');
  const hash = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  const target = join(dir, hash(content).slice(0, 16));
  const present = await readFile(target).catch(() => null);
  if (present && hash(present) === hash(content)) return target;
  await mkdir(dir, { recursive: true });
  const partial = `${target}.${process.pid}.partial`;
  await writeFile(partial, content, { mode: 0o555 });
  // The umask may have taken bits away: every user a container runs as must be able to run it.
  await chmod(partial, 0o555);
  await rename(partial, target);
  return target;
}
