// bench/build, second part: `svc deploy examples/hello` (the built bin/svc, as a user runs it:
// the service created, the directory packed and uploaded, built, deployed) from the command's
// start to the first 200 through svc's proxy, against what a user does by hand with the bare
// Engine API in the same run: pack the same directory (tar-fs), build it, create and start a
// container of the image (the same runtime, hardening, limits and CPU group a service gets:
// first-answer.ts), first 200 from it.
// Each svc round deploys a new service (a first 200 of a new deployment, not of the last one);
// the two sides alternate round by round.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pack } from 'tar-fs';
import type { SvcClient } from '../../packages/client/src/index.js';
import { docker, finished } from '../../packages/svcd/test/images.js';
import { ensureExampleImages } from '../../examples/base-images.js';
import { ROOT } from '../svcd.js';
import { bareCpuGroup, bareFirstAnswer, until200 } from '../first-answer.js';

const run = promisify(execFile);
const HELLO = join(ROOT, 'examples/hello');
const SVC = join(ROOT, 'bin/svc');
const NETWORK = 'svc-bench-build-bare';

export interface DirectoryRounds {
  svc: number[];
  bare: number[];
  runtime: string;
}

/** `rounds` of each side; `c` is the tenant, `env` logs bin/svc in as it (SVC_URL, SVC_API_KEY). */
export async function deployDirectoryRounds(c: SvcClient, env: NodeJS.ProcessEnv, proxyPort: number, rounds: number): Promise<DirectoryRounds> {
  await ensureExampleImages();
  const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
  const runtime = 'runsc' in (info.Runtimes ?? {}) ? 'runsc' : 'runc';
  await docker.createNetwork({ Name: NETWORK, Driver: 'bridge', CheckDuplicate: true }).catch(() => {});
  const result: DirectoryRounds = { svc: [], bare: [], runtime };

  const svcRound = async (name: string): Promise<number> => {
    const t0 = performance.now();
    const r = await run(SVC, ['deploy', HELLO, '--name', name], { env });
    const url = new URL(r.stdout.trim());
    await until200('127.0.0.1', proxyPort, '/', url.host);
    return performance.now() - t0;
  };
  // Read once svc runs one of the tenant's containers (the warm-up's), below.
  let bareGroup: string | null = null;
  const bareRound = async (tag: string): Promise<number> => {
    const t0 = performance.now();
    await finished(await docker.buildImage(pack(HELLO), { t: tag, rm: true, forcerm: true }));
    const remove = await bareFirstAnswer(tag, NETWORK, runtime, '/', bareGroup);
    const ms = performance.now() - t0;
    await remove();
    return ms;
  };

  try {
    // Warm-up: the base image pulled and the layers cached on both sides; the tenant's network made.
    await svcRound('warm-up');
    bareGroup = await bareCpuGroup((await c.tenant()).id);
    process.stderr.write(`bench-build: the bare side's CPU group: ${bareGroup ?? "none (svc places its tenants' containers in none)"}\n`);
    await bareRound('svc-bench/bare-directory:warm');
    for (let i = 0; i < rounds; i++) {
      result.svc.push(await svcRound(`hello-${i}`));
      result.bare.push(await bareRound(`svc-bench/bare-directory:${i}`));
      process.stderr.write(`bench-build: directory round ${i + 1}/${rounds}: svc deploy ${Math.round(result.svc.at(-1)!)} ms, by hand ${Math.round(result.bare.at(-1)!)} ms\n`);
      // Not measured: the services go, so that the tenant stays within its quota of services.
      for (const s of await c.listServices({ limit: 200 })) if (s.name.startsWith('hello-')) await c.deleteService(s.id);
    }
  } finally {
    await docker.getNetwork(NETWORK).remove().catch(() => {});
  }
  return result;
}
