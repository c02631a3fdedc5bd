// The engine going away is not the workloads failing (Workloads as desired state, item 5): the
// machine's real dockerd is stopped and started again under running services, a database, the
// task board and an environment, as an upgrade or a crash of the engine would. Every one of them
// must come back and answer, and the services' crash counts must not be charged for it.
//
// This stops the engine every other test uses: `make test` runs it alone, after every other
// engine file and the files beside them have ended (scripts/run-tests.ts), so no other file's
// containers are stopped under it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { SvcClient } from '@svc/client';
import { ENGINE_UNAVAILABLE } from '../src/services/deployer.js';
import { freePort, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, docker, engineTenants, ensureTestImages } from './images.js';
import { ensureDbImages, ensureNodeImage, ensureTemplateImages } from './operator-images.js';

const ENGINE_SOCKET = '/var/run/docker.sock';
const ENSURE_DOCKER = new URL('../../../scripts/ensure-docker.sh', import.meta.url).pathname;

async function engineAnswers(): Promise<boolean> {
  return docker.ping().then(() => true, () => false);
}

function dockerdRuns(): boolean {
  try {
    execFileSync('pgrep', ['-x', 'dockerd']);
    return true;
  } catch {
    return false;
  }
}

/** Stops the machine's dockerd (SIGTERM: it stops every container, then exits) and starts it again. */
async function restartEngine(whileAway: () => Promise<void>): Promise<void> {
  execFileSync('pkill', ['-TERM', '-x', 'dockerd']);
  await waitFor('the engine to stop answering', async () => (!existsSync(ENGINE_SOCKET) || !(await engineAnswers()) ? true : undefined), 60_000);
  try {
    await whileAway();
  } finally {
    // A new dockerd refuses to start while the old one's pid file is there: it goes last.
    await waitFor('dockerd to exit', () => Promise.resolve(dockerdRuns() ? undefined : true), 60_000);
    // The same script that started it for the suite (it says what it did on stderr).
    execFileSync('bash', [ENSURE_DOCKER], { stdio: ['ignore', 'ignore', 'inherit'] });
  }
  await waitFor('dockerd to answer again', async () => ((await engineAnswers()) ? true : undefined), 60_000);
}

describe('the engine restarted under running workloads', () => {
  let t: TestServer;
  let proxyPort: number;
  const tenants = engineTenants(() => t);

  before(async () => {
    await Promise.all([ensureTestImages(), ensureDbImages(), ensureNodeImage(), ensureTemplateImages(['default'])]);
    proxyPort = await freePort();
    t = await startServer({
      realTime: true,
      config: { proxyListen: `127.0.0.1:${proxyPort}`, baseDomain: 'svc.localhost' },
      overrides: { readyTimeoutMs: 60_000, databaseReadyTimeoutMs: 120_000, kanbanReadyTimeoutMs: 120_000 },
    });
  });
  after(async () => {
    await t.close();
    await tenants.cleanup();
  });

  test('services, a database, the board and an environment come back; no crash is counted', async () => {
    const a = await tenants.add();
    const c: SvcClient = a.client;
    const services = [await c.createService({ name: 'first', image: BUSYBOX_IMAGE }), await c.createService({ name: 'second', image: BUSYBOX_IMAGE })];
    const db = await c.createDatabase({ name: 'cache', type: 'redis' });
    await c.createKanban();
    const env = await c.createEnvironment({ name: 'dev', template_id: 'default' });

    const answersThroughProxy = async (label: string) => (await viaProxy(proxyPort, `${label}.svc.localhost`).catch(() => ({ status: 0 }))).status === 200;
    /** What is not back yet, in words (empty: everything runs and answers). */
    const notBack = async (): Promise<string[]> => {
      const missing: string[] = [];
      for (const s of services) {
        const now = await c.service(s.id);
        if (now.status !== 'running') missing.push(`service ${now.name}: ${now.status} (${now.last_error ?? ''})`);
        else if (!(await answersThroughProxy(now.dns_label))) missing.push(`service ${now.name}: no answer through the proxy`);
      }
      const database = await c.database(db.id);
      if (database.status !== 'running') missing.push(`database: ${database.status} (${database.last_error ?? ''})`);
      const board = await c.kanban();
      if (board.status !== 'running') missing.push(`board: ${board.status} (${board.last_error ?? ''})`);
      const environment = await c.environment(env.id);
      if (environment.status !== 'running') missing.push(`environment: ${environment.status} (${environment.last_error ?? ''})`);
      else {
        const exec = await c.exec(env.id, { command: ['echo', 'ok'] }).catch((err: unknown) => ({ stdout: String(err) }));
        if (exec.stdout.trim() !== 'ok') missing.push(`environment exec: ${exec.stdout.slice(0, 200)}`);
      }
      return missing;
    };
    const allBack = async (what: string) => {
      let missing: string[] = [];
      await waitFor(what, async () => ((missing = await notBack()).length === 0 ? true : undefined), 240_000).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; not back: ${missing.join('; ')}`);
      });
    };
    await allBack('every workload to run');

    await restartEngine(async () => {
      // While the engine is away: the services wait as deploying, saying why, not failed.
      let seen = '';
      await waitFor('the services to wait for the engine', async () => {
        const now = await Promise.all(services.map((s) => c.service(s.id)));
        seen = JSON.stringify(now.map((s) => [s.status, s.last_error, s.crash_count]));
        return now.every((s) => s.status === 'deploying' && s.last_error === ENGINE_UNAVAILABLE) ? now : undefined;
      }, 30_000).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; the services: ${seen}`);
      });
      for (const s of services) assert.equal((await c.service(s.id)).crash_count, 0);
    });

    await allBack('every workload to be back and answering');
    for (const s of services) {
      const now = await c.service(s.id);
      assert.equal(now.crash_count, 0, `${now.name}: the engine's restart is not a crash`);
      assert.equal(now.circuit_open, false);
    }
    const crashed = (await c.activity({ limit: 200 })).filter((e) => e.action === 'service.crashed');
    assert.deepEqual(crashed, [], 'no crash recorded');
  });
});
