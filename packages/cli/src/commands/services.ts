// Services: create (from an image or a snapshot), lifecycle with --wait, logs (-f), deployments,
// metrics, snapshots, and `svc env`: a service's variables, and exec in a developer environment.
import { createWriteStream } from 'node:fs';
import { basename, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { ApiError, FILE_MAX_BYTES, WAIT_MAX_S, type Service, type SvcClient } from '@svc/client';
import { spawn } from 'node:child_process';
import type { Cli } from '../context.js';
import { action, CommandFailed, integer, keyValues, pipeToStdout, waitUntil, type Output } from '../output.js';
import { metricsOptions, type MetricsOptions } from './metrics-options.js';

/** Deploys run for up to 10 minutes on the server (spec). */
const DEPLOY_WAIT_MS = 10 * 60_000;

/**
 * With --wait, for a service just told to deploy (said first): until it leaves deploying; a
 * failed or crashed deploy fails the command. Each question waits on the server until the deploy
 * ends (?wait, no longer than the command's own wait has left), so the answer comes when it does,
 * not at the next of a poll's questions.
 */
export async function settled(out: Output, c: SvcClient, serviceId: string): Promise<Service> {
  const get = (leftMs: number) => c.service(serviceId, { wait: Math.min(WAIT_MAX_S, Math.max(1, Math.ceil(leftMs / 1000))) });
  const s = await waitUntil(out, 'deploy', get, (v) => v.status !== 'deploying', 'running', DEPLOY_WAIT_MS, 'deploying');
  if (s.url) out.note(`running at ${s.url}`);
  return s;
}

/** A service by its id, or else by its name (names are unique per tenant, case aside). */
export async function serviceByNameOrId(c: SvcClient, which: string): Promise<Service> {
  const byId = await c.service(which).catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  });
  const named = byId ?? (await serviceNamed(c, which));
  if (!named) throw new CommandFailed(`no service named or with id ${JSON.stringify(which)}`);
  return named;
}

/** The tenant's service of that name (names are unique per tenant, case aside), looked for page by page. */
export async function serviceNamed(c: SvcClient, name: string): Promise<Service | undefined> {
  const PAGE = 200;
  for (let offset = 0; ; offset += PAGE) {
    const page = await c.listServices({ limit: PAGE, offset });
    const found = page.find((s) => s.name.toLowerCase() === name.toLowerCase());
    if (found || page.length < PAGE) return found;
  }
}

/**
 * Hands the URL to $BROWSER (its first entry, as in `firefox:chromium`; arguments allowed), or
 * else to the system's opener, without waiting for the browser to exit (it may run for hours).
 */
async function openInBrowser(url: string): Promise<void> {
  const browser = process.env.BROWSER?.split(':')[0]?.trim();
  const [opener = '', ...args] = browser ? browser.split(/\s+/) : [process.platform === 'darwin' ? 'open' : 'xdg-open'];
  await new Promise<void>((resolve, reject) => {
    const child = spawn(opener, [...args, url], { stdio: 'ignore', detached: true });
    child.once('error', (err) => reject(new CommandFailed(`could not run ${opener} (${err.message}): open ${url} yourself, or set BROWSER`)));
    child.once('spawn', () => {
      child.unref();
      resolve();
    });
  });
}

const LIFECYCLE = {
  start: 'start a stopped service (a new deployment)',
  stop: 'stop a service (its container is removed; its configuration stays)',
  restart: 'restart a service: a new container, with its current env',
  redeploy: 'deploy the service again, pulling its image anew',
  reset: 'close the crash circuit and deploy again',
} as const;

export function serviceCommands(program: Command, { out, client }: Cli): void {
  const services = program.command('services').alias('service').description('services: containers from an image or a build');
  services
    .command('list')
    .description('the services: id, name, status, URL and age (--wide or --json: every field)')
    .action(action(out, () => client().listServices({ limit: 200 }), { columns: ['id', 'name', 'status', 'url', 'age'] }));
  program
    .command('open <service>')
    .description("open a service's URL in the browser ($BROWSER, else xdg-open or open); the service by name or id")
    .action(
      action(out, async (which: string) => {
        const s = await serviceByNameOrId(client(), which);
        if (!s.url) throw new CommandFailed(`${s.name} has no URL yet (status ${s.status})`);
        out.note(`opening ${s.url}`);
        await openInBrowser(s.url);
      }),
    );
  services
    .command('create <name>')
    .description('create a service (it deploys in the background; --wait follows it)')
    .option('--image <ref>', 'image (Docker Hub or a loopback registry); required unless --from-snapshot')
    .option('--port <port>', 'port the container serves on (default 8000)', integer)
    .option('--env <KEY=VALUE...>', 'environment variables')
    .option('--health-path <path>', 'ready once GET <path> on its port answers 2xx or 3xx (default: once the port accepts a connection)')
    .option('--from-snapshot <snapshotID>', 'copy image, port, env and health check from a snapshot')
    .option('--replicas <n>', 'how many copies run, load-balanced (default 1; above 1 on a swarm only)', integer)
    .option('--wait', 'wait until it runs (or fails), telling its progress')
    .action(
      action(out, async (name: string, o: { image?: string; port?: number; env?: string[]; healthPath?: string; fromSnapshot?: string; replicas?: number; wait?: boolean }) => {
        const c = client();
        if (o.fromSnapshot && [o.image, o.port, o.env, o.healthPath].some((given) => given !== undefined)) {
          throw new CommandFailed('--from-snapshot takes the image, port, env and health check from the snapshot: leave out --image, --port, --env and --health-path');
        }
        const healthCheck = o.healthPath === undefined ? undefined : { type: 'http' as const, path: o.healthPath };
        const created = o.fromSnapshot
          ? await c.serviceFromSnapshot(o.fromSnapshot, name, o.replicas)
          : await c.createService({ name, image: o.image, port: o.port, env: o.env ? keyValues(o.env) : undefined, health_check: healthCheck, replicas: o.replicas });
        return o.wait && created.status === 'deploying' ? settled(out, c, created.id) : created;
      }),
    );
  services.command('show <serviceID>').description('one service, every field').action(action(out, (id: string) => client().service(id)));
  services.command('rename <serviceID> <name>').description('rename a service (its URL stays)').action(action(out, (id: string, name: string) => client().renameService(id, name)));
  services.command('delete <serviceID>').description('delete a service, its container and its built images').action(
    action(out, async (id: string) => {
      await client().deleteService(id);
      out.note(`service ${id} deleted`);
    }),
  );
  for (const verb of ['start', 'stop', 'restart', 'redeploy', 'reset'] as const) {
    services
      .command(`${verb} <serviceID>`)
      .description(LIFECYCLE[verb])
      .option('--wait', 'wait until the deployment it starts is done')
      .action(
        action(out, async (id: string, o: { wait?: boolean }) => {
          const c = client();
          const r = await c.serviceAction(id, verb);
          return o.wait && r.service.status === 'deploying' ? settled(out, c, id) : r;
        }),
      );
  }
  services
    .command('scale <serviceID> <replicas>')
    .description('set how many copies of the service run (a running service is deployed again with the new count)')
    .option('--wait', 'wait until the deployment it starts is done')
    .action(
      action(out, async (id: string, replicas: string, o: { wait?: boolean }) => {
        const c = client();
        const r = await c.scaleService(id, integer(replicas));
        return o.wait && r.service.status === 'deploying' ? settled(out, c, id) : r;
      }),
    );
  services.command('deployments <serviceID>').description("the service's deployments, newest first").action(action(out, (id: string) => client().deployments(id)));
  services
    .command('cancel-deployment <serviceID> <deploymentID>').description('cancel a deployment that has not finished')
    .action(action(out, (id: string, dep: string) => client().cancelDeployment(id, dep)));
  metricsOptions(services.command('metrics <serviceID>').description("the service's metered usage rollups")).action(
    action(out, (id: string, o: MetricsOptions) => client().serviceMetrics(id, o)),
  );

  program
    .command('logs <serviceID>')
    .description("a service's logs (stdout and stderr of its container)")
    .option('-f, --follow', 'keep printing as lines come, until the container ends or Ctrl-C')
    .option('--tail <n>', 'lines from the end (default 100, max 10000)', integer)
    .action(
      action(out, async (id: string, o: { follow?: boolean; tail?: number }) => {
        if (o.follow) await pipeToStdout(await client().followServiceLogs(id, o.tail));
        else process.stdout.write(await client().serviceLogs(id, o.tail));
      }),
    );

  const snapshots = program.command('snapshots').description("snapshots of a service's image, port and env");
  snapshots.command('list').description("the tenant's snapshots").action(action(out, () => client().listSnapshots()));
  snapshots
    .command('create <serviceID>').description("save the service's image, port and env as a snapshot")
    .requiredOption('--name <name>')
    .option('--description <text>')
    .action(action(out, (id: string, o: { name: string; description?: string }) => client().createSnapshot(id, o.name, o.description)));
  snapshots.command('show <snapshotID>').description('one snapshot').action(action(out, (id: string) => client().snapshot(id)));
  snapshots.command('delete <snapshotID>').description('delete a snapshot').action(
    action(out, async (id: string) => {
      await client().deleteSnapshot(id);
      out.note(`snapshot ${id} deleted`);
    }),
  );

  const domains = program.command('domains').description("a service's custom domains (proven with a DNS TXT record)");
  domains.command('list <service>').description("the service's custom domains (service: id or name)").action(
    action(out, async (which: string) => client().listDomains((await serviceByNameOrId(client(), which)).id), { columns: ['id', 'hostname', 'status', 'url', 'last_error'] }),
  );
  domains.command('add <service> <hostname>').description('add a custom domain; prints the TXT record that proves you own it').action(
    action(out, async (which: string, hostname: string) => {
      const d = await client().addDomain((await serviceByNameOrId(client(), which)).id, hostname);
      out.note(`create the TXT record ${d.verification.name} with the value ${d.verification.value}; svc looks for it every minute for an hour, then every 15 minutes (svc domains verify looks now, at most every 10 s)`);
      return d;
    }),
  );
  domains.command('verify <service> <domainID>').description('check the TXT record (and the certificate) now').action(
    action(out, async (which: string, id: string) => {
      const d = await client().verifyDomain((await serviceByNameOrId(client(), which)).id, id);
      if (d.last_error) out.note(d.last_error);
      return d;
    }),
  );
  domains.command('delete <service> <domainID>').description('remove a custom domain (no longer routed)').action(
    action(out, async (which: string, id: string) => {
      await client().removeDomain((await serviceByNameOrId(client(), which)).id, id);
      out.note(`domain ${id} removed`);
    }),
  );
}

export function envCommands(program: Command, { out, client }: Cli): void {
  const env = program.command('env').description("a service's environment variables; exec in a developer environment");
  env
    .command('list <serviceID>')
    .description('variable names (values masked unless --reveal, which is audit-logged)')
    .option('--reveal', 'show the values')
    .action(
      action(out, async (id: string, o: { reveal?: boolean }) => {
        const vars = await client().serviceEnv(id, o.reveal === true);
        return out.json() ? vars : Object.entries(vars).map(([key, value]) => ({ key, value }));
      }),
    );
  env
    .command('set <serviceID> <KEY=VALUE...>')
    .description('set variables (restart the service to apply them)')
    .action(
      action(out, async (id: string, pairs: string[]) => {
        const vars = keyValues(pairs);
        await client().setServiceEnv(id, vars);
        out.note(`set ${Object.keys(vars).join(', ')} (restart the service to apply)`);
      }),
    );
  env
    .command('unset <serviceID> <KEY...>').description('remove environment variables (applied at the next deploy)')
    .action(
      action(out, async (id: string, keys: string[]) => {
        for (const k of keys) await client().unsetServiceEnv(id, k);
        out.note(`unset ${keys.join(', ')} (restart the service to apply)`);
      }),
    );
  env
    .command('exec <environmentID> <command...>')
    .description('run a command in a developer environment: `svc env exec ENV -- CMD ARGS...`; its output streams as it comes; ^C sends it SIGINT (twice: leave, killing it); exits with its exit code')
    .option('--workdir <dir>', 'working directory (default /workspace)')
    .option('--timeout <seconds>', 'kill it after this long', integer)
    .option('-e, --env <KEY=VALUE...>', 'variables for this command')
    .option('-i, --stdin', "give this terminal's stdin to the command (read whole first, at most 512 KiB)")
    .action(
      action(out, async (id: string, command: string[], o: { workdir?: string; timeout?: number; env?: string[]; stdin?: boolean }) => {
        const req = {
          command,
          work_dir: o.workdir,
          timeout: o.timeout,
          ...(o.env ? { env: keyValues(o.env) } : {}),
          ...(o.stdin ? { stdin: await readStdin() } : {}),
        };
        // --json: the whole outcome as one object, as the API's plain exec answers it.
        if (out.json()) return client().exec(id, req);
        const { execId, events } = await client().startExec(id, req);
        // ^C is the command's, as in a terminal: sent to its process group as SIGINT; a second
        // one leaves, which kills it (a command through the engine has no id: the first leaves).
        let interrupted = false;
        const onInterrupt = () => {
          if (execId === null || interrupted) process.exit(130);
          interrupted = true;
          client()
            .signalExec(id, execId, 'SIGINT')
            .then(
              () => out.note('svc: sent SIGINT to the command; ^C again to leave (and kill it)'),
              (err: unknown) => {
                // 404: its first process just ended; what it printed last and its exit still come.
                if (!(err instanceof ApiError && err.status === 404)) out.note(`svc: SIGINT not sent (${(err as Error).message}); ^C again to leave (and kill it)`);
              },
            );
        };
        process.on('SIGINT', onInterrupt);
        try {
          for await (const e of events) {
            if (e.type === 'stdout') process.stdout.write(e.data);
            else if (e.type === 'stderr') process.stderr.write(e.data);
            else if (e.type === 'error') {
              out.note(`svc: ${e.error}`);
              process.exitCode = 1;
            } else {
              if (e.truncated) out.note('svc: output truncated at 1 MiB');
              if (e.timed_out) out.note('svc: killed at the timeout');
              process.exitCode = e.exit_code;
            }
          }
        } finally {
          process.off('SIGINT', onInterrupt);
        }
        return undefined;
      }),
    );
  env
    .command('shell <environmentID>')
    .description('an interactive terminal in a developer environment (a login shell in /workspace); exits with its exit code')
    .action(
      action(out, async (id: string) => {
        process.exitCode = await shell(client(), id, out);
        return undefined;
      }),
    );
  env
    .command('cp <source> <destination>')
    .description('copy a file to or from a developer environment: `svc env cp ./local ENV:/path` or `svc env cp ENV:path ./local` (a remote path is absolute or relative to /workspace; at most 100 MiB; a local path with a colon starts with ./)')
    .action(
      action(out, async (source: string, destination: string) => {
        // Loaded here, not with the CLI: node:fs/promises brings readline's modules with it, 1-2
        // ms of every command's start, and only this command uses it.
        const { readFile, rename, rm, stat } = process.getBuiltinModule('node:fs/promises');
        const from = remoteOf(source);
        const to = remoteOf(destination);
        if (to && !from) {
          const local = await stat(source);
          if (!local.isFile()) throw new Error(`${source} is not a file (directories: svc env sync, or tar through svc env exec -i)`);
          if (local.size > FILE_MAX_BYTES) throw new Error(`${source} is larger than the files API's ${FILE_MAX_BYTES / (1024 * 1024)} MiB`);
          const info = await client().writeFile(to.id, to.path, new Uint8Array(await readFile(source)), `0${(local.mode & 0o7777).toString(8)}`);
          out.note(`${source} -> ${to.id}:${info.path} (${info.size} bytes)`);
          return out.json() ? info : undefined;
        }
        if (!from || to) throw new Error('one side of a copy is ENV:path and the other a local path');
        const remote = from;
        const target = (await stat(destination).catch(() => null))?.isDirectory() ? join(destination, basename(remote.path)) : destination;
        // Written beside the target and renamed over it once whole: a copy cut midway leaves what was there.
        const partial = `${target}.svc-partial-${process.pid}`;
        try {
          await pipeline(Readable.fromWeb(await client().readFile(remote.id, remote.path)), createWriteStream(partial, { flags: 'wx' }));
          await rename(partial, target);
        } catch (err) {
          await rm(partial, { force: true });
          throw err;
        }
        out.note(`${remote.id}:${remote.path} -> ${target}`);
        return undefined;
      }),
    );
  env
    .command('ls <environmentID> [path]')
    .description("list a directory of a developer environment (default /workspace)")
    .action(
      action(out, async (id: string, path?: string) => {
        const list = await client().listFiles(id, path ?? '/workspace');
        if (list.truncated) out.note('svc: more than 10,000 entries; the first 10,000 are listed');
        return out.json() ? list : list.entries.map((e) => ({ name: e.type === 'directory' ? `${e.name}/` : e.name, type: e.type, size: e.size, mode: e.mode, modified: new Date(e.modified_at * 1000).toISOString() }));
      }),
    );
  env
    .command('rm <environmentID> <path>')
    .description('remove a file (or, with -r, a directory and everything in it) in a developer environment')
    .option('-r, --recursive', 'a directory and its entries')
    .action(
      action(out, async (id: string, path: string, o: { recursive?: boolean }) => {
        await client().removeFile(id, path, o.recursive === true);
        out.note(`removed ${path}`);
      }),
    );
}

/** `ENV:path` names a file of an environment; anything else (./a:b included) is local. */
function remoteOf(arg: string): { id: string; path: string } | null {
  const m = /^(?<id>[A-Za-z0-9_-]+):(?<path>.+)$/.exec(arg);
  return m?.groups?.id && m.groups.path ? { id: m.groups.id, path: m.groups.path } : null;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Carries this terminal to the environment's and back until the shell ends, and answers its exit
 * code. On a terminal, stdin goes raw (every key as typed, ^C included, to the remote shell) and
 * window resizes follow; piped stdin is sent as it comes and its end as ^D.
 */
function shell(api: SvcClient, id: string, out: Output): Promise<number> {
  const tty = process.stdin.isTTY && process.stdout.isTTY;
  const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 });
  const socket = api.terminal(id, size());
  return new Promise<number>((resolve) => {
    let exitCode: number | null = null;
    let opened = false;
    const input = (chunk: Buffer) => socket.send(chunk);
    const inputEnded = () => socket.send(new Uint8Array([4]));
    const resized = () => socket.send(JSON.stringify({ type: 'resize', ...size() }));
    socket.addEventListener('open', () => {
      opened = true;
      if (tty) {
        process.stdin.setRawMode(true);
        process.stdout.on('resize', resized);
      }
      process.stdin.on('data', input);
      process.stdin.on('end', inputEnded);
      process.stdin.resume();
    });
    socket.addEventListener('message', (event: MessageEvent) => {
      if (typeof event.data === 'string') {
        const m = JSON.parse(event.data) as { type?: string; exit_code?: number };
        if (m.type === 'exit' && typeof m.exit_code === 'number') exitCode = m.exit_code;
        return;
      }
      process.stdout.write(new Uint8Array(event.data as ArrayBuffer));
    });
    socket.addEventListener('close', (event: CloseEvent) => {
      if (tty) process.stdin.setRawMode(false);
      process.stdin.off('data', input);
      process.stdin.off('end', inputEnded);
      process.stdout.off('resize', resized);
      process.stdin.pause();
      if (!opened) {
        // The upgrade was refused; the status is not visible here, the environment says why.
        void api.environment(id).then(
          (e) => out.note(e.status === 'running' ? 'svc: the terminal could not be opened (is its agent running? svc env exec still works)' : `svc: the environment is ${e.status}: start it first`),
          (err: unknown) => out.note(`svc: ${err instanceof Error ? err.message : String(err)}`),
        ).finally(() => resolve(1));
        return;
      }
      if (exitCode === null) out.note(`svc: the terminal closed without the shell's exit (${event.code}${event.reason ? `: ${event.reason}` : ''})`);
      resolve(exitCode ?? 1);
    });
  });
}
