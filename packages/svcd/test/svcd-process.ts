// The built launcher bin/svcd as a child process, for the tests that kill it or check its start-up.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { SvcClient, type QuotaPatchRequest } from '@svc/client';
import { ADMIN_TOKEN, freePort } from './harness.js';
import { removeTenantWorkloads } from './images.js';

export const BIN = join(process.env.SVC_BIN_DIR ?? resolve(import.meta.dirname, '../../../bin'), 'svcd');

/** Starts bin/svcd on a loopback port (a free one unless given) and waits until it listens. */
export async function startSvcdProcess(args: string[], env: Record<string, string> = {}, listenPort?: number): Promise<{ proc: ChildProcess; url: string }> {
  const port = listenPort ?? (await freePort());
  const proc = spawn(BIN, ['--metrics-listen', '127.0.0.1:0', ...args, '--listen', `127.0.0.1:${port}`, '--log-level', 'warn'], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await listening(proc);
  return { proc, url: `http://127.0.0.1:${port}` };
}

/** Resolves when a starting svcd prints that it listens; rejects if it exits first. */
export function listening(proc: ChildProcess): Promise<void> {
  return new Promise<void>((res, rej) => {
    let out = '';
    // What svcd printed on stderr, when it is a pipe (the benches let it through), goes into
    // the error: it says why a start failed.
    const { stderr } = proc;
    let err = '';
    let settled = false;
    proc.stdout!.on('data', (b: Buffer) => {
      if (settled) return; // read on (an unread pipe would fill), not kept
      out += b.toString();
      if (out.includes('svcd listening on')) {
        settled = true;
        res();
      }
    });
    proc.on('error', (e) => {
      settled = true;
      rej(e);
    });
    stderr?.on('data', (b: Buffer) => {
      err = (err + b.toString()).slice(-4000);
    });
    // Its stderr may still be draining at 'exit'; a child it left holding the pipe must not hold the test.
    proc.on('exit', (code, signal) => {
      if (settled) return;
      settled = true;
      const fail = () => rej(new Error(`svcd exited with ${code ?? signal} before listening${stderr ? `; its stderr: ${err.trim() || '(nothing)'}` : ''}`));
      if (!stderr || stderr.closed) {
        fail();
        return;
      }
      const timer = setTimeout(fail, 500).unref();
      stderr.once('close', () => {
        clearTimeout(timer);
        fail();
      });
    });
  });
}

export function exited(proc: ChildProcess): Promise<number | null> {
  // A process killed by a signal has no exit code but a signal code: it has exited all the same.
  return new Promise((res) => (proc.exitCode !== null || proc.signalCode !== null ? res(proc.exitCode) : proc.on('exit', (code) => res(code))));
}

export interface KillableSvcd {
  tenantId: string;
  /** The tenant's API key. */
  apiKey: string;
  /** The running svcd's base URL and process id. */
  readonly url: string;
  readonly pid: number;
  /** The tenant's client on the svcd running now. */
  client: SvcClient;
  /** SIGKILL: nothing is shut down gracefully. */
  kill(): Promise<void>;
  /** A new svcd on the same data dir; the tenant's client for it. */
  restart(): Promise<SvcClient>;
  /** Stops svcd and removes the data dir and the tenant's containers, volumes and network. */
  close(): Promise<void>;
}

/**
 * bin/svcd with --dev --open-registration on a fresh data dir and one registered tenant, for
 * the tests that kill svcd and start it again. `env` may hold SVC_ADMIN_TOKEN (the client then
 * carries it). `plan`: the tenant's quotas are patched to it (through the operator route, with
 * SVC_ADMIN_TOKEN or the tests' ADMIN_TOKEN).
 */
export async function killableSvcd(name: string, args: string[], env: Record<string, string> = {}, plan?: QuotaPatchRequest): Promise<KillableSvcd> {
  const dir = mkdtempSync(join(tmpdir(), `svcd-${name}-`));
  // Its own scratch directory, removed with the data dir: a killed svcd leaves its folder there.
  const scratch = mkdtempSync(join(tmpdir(), `svcd-${name}-scratch-`));
  const allArgs = ['--dev', '--open-registration', '--data-dir', dir, '--scratch-dir', scratch, ...args];
  const adminToken = env.SVC_ADMIN_TOKEN ?? (plan ? ADMIN_TOKEN : undefined);
  const svcdEnv = adminToken ? { ...env, SVC_ADMIN_TOKEN: adminToken } : env;
  let running = await startSvcdProcess(allArgs, svcdEnv);
  const anon = new SvcClient({ baseUrl: running.url, adminToken });
  const reg = await anon.register({ name, email: `${name}@x.io` });
  if (plan) await anon.patchQuotas(reg.tenant_id, plan);
  const stop = async (signal: NodeJS.Signals) => {
    if (running.proc.exitCode !== null || running.proc.signalCode !== null) return;
    running.proc.kill(signal);
    await exited(running.proc);
  };
  return {
    tenantId: reg.tenant_id,
    apiKey: reg.api_key,
    get url() {
      return running.url;
    },
    get pid() {
      return running.proc.pid ?? -1;
    },
    client: anon.withKey(reg.api_key),
    kill: () => stop('SIGKILL'),
    restart: async () => {
      running = await startSvcdProcess(allArgs, svcdEnv);
      return new SvcClient({ baseUrl: running.url, apiKey: reg.api_key, adminToken });
    },
    close: async () => {
      await stop('SIGTERM');
      await removeTenantWorkloads([reg.tenant_id]);
      rmSync(dir, { recursive: true, force: true });
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}
