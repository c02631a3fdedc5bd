// bench/proxy: what svc's routing (its supervised Caddy) costs per request, against the same
// upstream container reached straight at its port, through a plain Caddy (one reverse_proxy
// route; the proxy svc keeps: its routing may cost at most 5 percent over it) and through nginx
// (Debian's, a keep-alive upstream, the usual reverse-proxy set-up) in the same run. wrk (Debian)
// drives each target for ROUNDS rounds; they alternate within each round, in a rotating order, so
// the machine's drift hits all alike. Figures are medians over the rounds. The upstream is
// bench/upstream.ts's.
//
// Then: the time from a service turning `running` (polled on the API every 2 ms) to its route
// answering through the proxy, median of 20.
// Run: make bench-proxy; --smoke: 1 round of 1 s per target, 2 route-ready rounds (bench/smoke.ts).
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SvcClient } from '../../packages/client/src/index.js';
import { workloadName } from '../../packages/svcd/src/services/deployer.js';
import { freePort } from '../../packages/svcd/test/harness.js';
import { docker, removeTenantWorkloads } from '../../packages/svcd/test/images.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';
import { startNginx } from '../nginx.js';
import { UPSTREAM_IMAGE, ensureUpstreamImage } from '../upstream.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = SMOKE ? 1 : Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = 32;
const READY_ROUNDS = SMOKE ? 2 : 20;
/** svcd's --sandbox: `auto` runs the upstream under gVisor when the engine has it. */
const SANDBOX = process.env.BENCH_SANDBOX ?? 'auto';
interface WrkFigures {
  rps: number;
  p99ms: number;
}

// Asynchronous: a blocked event loop would keep the API client's idle sockets past svcd's
// keep-alive timeout, and the next API call would find them closed.
const execFileAsync = promisify(execFile);

async function wrk(url: string, host?: string): Promise<WrkFigures> {
  const args = ['-t2', `-c${CONNECTIONS}`, `-d${SECONDS}s`, '--latency', ...(host ? ['-H', `Host: ${host}`] : []), url];
  const { stdout: out } = await execFileAsync('wrk', args, { encoding: 'utf8' });
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const p99 = /\s99%\s+([\d.]+)(us|ms|s)\b/.exec(out);
  const errors = /Non-2xx or 3xx responses: (\d+)/.exec(out) ?? /Socket errors: .*/.exec(out);
  if (!rps || !p99) throw new Error(`unexpected wrk output:\n${out}`);
  if (errors) throw new Error(`wrk saw errors:\n${out}`);
  const scale = { us: 0.001, ms: 1, s: 1000 }[p99[2] as 'us' | 'ms' | 's'];
  return { rps, p99ms: Number(p99[1]) * scale };
}

function status(port: number, host: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/', agent: false, timeout: 2_000, headers: { host } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
    req.end();
  });
}

/**
 * A plain Caddy in front of the upstream: the same binary svc runs, one reverse_proxy route and
 * nothing else (no host matching, no marker or error routes). A JSON config, since Debian's Caddy
 * 2.6 `caddy reverse-proxy --from http://...` still serves HTTPS on the port.
 */
function startPlainCaddy(dir: string, port: number, upstream: string): () => void {
  const config = join(dir, 'plain-caddy.json');
  writeFileSync(config, JSON.stringify({
    admin: { disabled: true },
    apps: { http: { servers: { plain: { listen: [`127.0.0.1:${port}`], automatic_https: { disable: true }, routes: [{ handle: [{ handler: 'reverse_proxy', upstreams: [{ dial: upstream }] }] }] } } } },
  }));
  const proc = spawn('caddy', ['run', '--config', config], { stdio: 'ignore' });
  return () => proc.kill('SIGTERM');
}

await ensureUpstreamImage();
const apiPort = await freePort();
const proxyPort = await freePort();
const nginxPort = await freePort();
const caddyPort = await freePort();
const dir = mkdtempSync(join(tmpdir(), 'svc-bench-proxy-'));
// The route-ready loop polls the API every 2 ms: the tenant rate limit is raised (--dev only).
const svcd = await spawnSvcd([
  '--dev', '--open-registration', '--data-dir', join(dir, 'data'), '--listen', `127.0.0.1:${apiPort}`,
  '--proxy-listen', `127.0.0.1:${proxyPort}`, '--log-level', 'warn', '--dev-rate-limit', '1000000:1000000,1000000:1000000',
  '--sandbox', SANDBOX,
]);
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}` });
const reg = await anon.register({ name: 'bench-proxy', email: 'bench-proxy@x.io' });
const c = anon.withKey(reg.api_key);
let stopNginx = () => {};
let stopCaddy = () => {};
// nginx and Caddy do not outlive the bench, should it exit without reaching the clean-up (a signal).
process.on('exit', () => {
  stopNginx();
  stopCaddy();
});
const smokeProblems: string[] = [];
try {
  const s = await c.createService({ name: 'upstream', image: UPSTREAM_IMAGE });
  const host = `${s.id}.localhost:${proxyPort}`;
  for (let i = 0; (await status(proxyPort, host)) !== 200; i++) {
    if (i > 3000) throw new Error('the upstream never answered through the proxy');
    await new Promise((r) => setTimeout(r, 10));
  }
  const ip = Object.values((await docker.getContainer(workloadName(s.id)).inspect()).NetworkSettings.Networks)[0]?.IPAddress;
  if (!ip) throw new Error('the upstream container has no address');
  stopNginx = startNginx(dir, nginxPort, `${ip}:8000`);
  stopCaddy = startPlainCaddy(dir, caddyPort, `${ip}:8000`);
  for (let i = 0; ; i++) {
    const answers = [await status(caddyPort, `127.0.0.1:${caddyPort}`), await status(nginxPort, `127.0.0.1:${nginxPort}`)];
    if (answers.every((a) => a === 200)) break;
    if (i > 500) throw new Error(`the plain Caddy or nginx never answered (${answers.join(', ')})`);
    await new Promise((r) => setTimeout(r, 10));
  }

  const targets: Record<'svc' | 'caddy' | 'direct' | 'nginx', () => Promise<WrkFigures>> = {
    svc: () => wrk(`http://127.0.0.1:${proxyPort}/`, host),
    caddy: () => wrk(`http://127.0.0.1:${caddyPort}/`),
    direct: () => wrk(`http://${ip}:8000/`),
    nginx: () => wrk(`http://127.0.0.1:${nginxPort}/`),
  };
  const names = Object.keys(targets) as Array<keyof typeof targets>;
  for (const name of names) await targets[name](); // warm-up: connections, caches
  const runs: Record<keyof typeof targets, WrkFigures[]> = { svc: [], caddy: [], direct: [], nginx: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length]!;
      runs[name].push(await targets[name]());
    }
    process.stderr.write(`bench-proxy: round ${r + 1}/${ROUNDS}: ${names.map((n) => `${n} ${Math.round(runs[n].at(-1)!.rps)} req/s`).join(', ')}\n`);
  }
  const fig = (n: keyof typeof targets) => ({ rps: median(runs[n].map((x) => x.rps)), p99: median(runs[n].map((x) => x.p99ms)) });
  const [svc, caddy, direct, nginx] = [fig('svc'), fig('caddy'), fig('direct'), fig('nginx')];

  // Route-ready: running on the API -> first 200 through the proxy.
  const ready: number[] = [];
  for (let i = 0; i < READY_ROUNDS; i++) {
    const x = await c.createService({ name: `ready-${i}`, image: UPSTREAM_IMAGE });
    const xHost = `${x.id}.localhost:${proxyPort}`;
    while ((await c.service(x.id)).status !== 'running') await new Promise((r) => setTimeout(r, 2));
    const t0 = performance.now();
    while ((await status(proxyPort, xHost)) !== 200) await new Promise((r) => setTimeout(r, 1));
    ready.push(performance.now() - t0);
    await c.deleteService(x.id);
  }

  const row = (label: string, f: { rps: number; p99: number }) => `| ${label} | ${Math.round(f.rps)} | ${f.p99.toFixed(2)} |`;
  console.log(`\n| wrk -t2 -c${CONNECTIONS} -d${SECONDS}s, median of ${ROUNDS} | req/s | p99 ms |\n|---|---|---|`);
  console.log(row('svc (Caddy, routed by Host)', svc));
  console.log(row('plain Caddy (one reverse_proxy route)', caddy));
  console.log(row('nginx reverse proxy, keep-alive upstream', nginx));
  console.log(row('straight to the container port', direct));
  console.log(`| svc / plain Caddy | ${(svc.rps / caddy.rps).toFixed(2)} (target at least 0.95) | ${(svc.p99 / caddy.p99).toFixed(2)} |`);
  console.log(`| svc / nginx | ${(svc.rps / nginx.rps).toFixed(2)} (reference) | ${(svc.p99 / nginx.p99).toFixed(2)} |`);
  console.log(`\n| running -> route answers, median of ${READY_ROUNDS} | ${median(ready).toFixed(1)} ms (target under 50 ms; max ${Math.max(...ready).toFixed(1)} ms) |`);
  for (const name of names) smokeProblems.push(...sampleProblems(`${name} req/s`, runs[name].map((x) => x.rps), ROUNDS));
  smokeProblems.push(...sampleProblems('route-ready', ready, READY_ROUNDS));
} finally {
  stopNginx();
  stopCaddy();
  await svcd.stop();
  await removeTenantWorkloads([reg.tenant_id]);
  rmSync(dir, { recursive: true, force: true });
}
if (SMOKE) smokeVerdict('bench-proxy', smokeProblems);
