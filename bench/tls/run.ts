// bench/tls: HTTPS through svc's proxy (--tls on) against a real ACME server (Debian's pebble,
// test/pebble.ts, every challenge validated against svc's Caddy).
//   1. A new host: from its route reaching the container (its <id>.localhost host answers on plain
//      HTTP) to its first HTTPS answer, the ACME order included; median over NEW_HOSTS services.
//   2. A host with its certificate: a new TLS connection and one request; median of CACHED_ROUNDS.
//   3. HTTPS requests/s through svc's Caddy against nginx terminating TLS (a certificate made here
//      with openssl) for the same upstream container, in the same rounds, alternating; h2load
//      (Debian's nghttp2-client) over HTTP/1.1, since it can connect to 127.0.0.1 while naming the
//      host in SNI and Host (--connect-to), which wrk cannot. Medians over the rounds.
// Run: make bench-tls; --smoke: 1 round of 1 s per target, 2 new hosts, 5 cached requests.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { SvcClient } from '../../packages/client/src/index.js';
import { workloadName } from '../../packages/svcd/src/services/deployer.js';
import { freePort } from '../../packages/svcd/test/harness.js';
import { docker, removeTenantWorkloads } from '../../packages/svcd/test/images.js';
import { startPebble } from '../../packages/svcd/test/pebble.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';
import { startNginx } from '../nginx.js';
import { UPSTREAM_BODY, UPSTREAM_IMAGE, ensureUpstreamImage } from '../upstream.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = SMOKE ? 1 : Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = 32;
const NEW_HOSTS = SMOKE ? 2 : 10;
const CACHED_ROUNDS = SMOKE ? 5 : 50;
const BASE_DOMAIN = 'bench.test';

const execFileAsync = promisify(execFile);

/** One HTTPS GET on a new connection, trusting `ca`: its status, and how long it took. */
function httpsGet(port: number, host: string, ca: string): Promise<{ status: number; body: string; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', servername: host, headers: { host }, ca, agent: false, timeout: 60_000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ms: performance.now() - t0 }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

function plainStatus(port: number, host: string): Promise<number> {
  return new Promise((resolve) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/', agent: false, timeout: 2_000, headers: { host } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
    req.end();
  });
}

/** h2load over HTTP/1.1 to 127.0.0.1:port, naming `host` in SNI and Host: requests/s and the mean time per request. */
async function h2load(port: number, host: string): Promise<{ rps: number; meanMs: number }> {
  const { stdout: out } = await execFileAsync('h2load', ['--h1', `-c${CONNECTIONS}`, '-t2', `-D${SECONDS}`, `--connect-to=127.0.0.1:${port}`, `https://${host}:${port}/`], { encoding: 'utf8' });
  const rps = Number(/finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(out)?.[1]);
  const mean = /time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)\b/.exec(out);
  const failed = Number(/requests: .* (\d+) failed/.exec(out)?.[1] ?? 'NaN');
  const status2xx = Number(/status codes: (\d+) 2xx/.exec(out)?.[1] ?? '0');
  if (!rps || !mean || failed !== 0 || status2xx === 0) throw new Error(`unexpected h2load output:\n${out}`);
  return { rps, meanMs: Number(mean[1]) * { us: 0.001, ms: 1, s: 1000 }[mean[2] as 'us' | 'ms' | 's'] };
}

await ensureUpstreamImage();
const [apiPort, httpPort, httpsPort, nginxPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
const pebble = await startPebble({ http: httpPort, tls: httpsPort });
const dir = mkdtempSync(join(tmpdir(), 'svc-bench-tls-'));
const svcd = await spawnSvcd([
  '--dev', '--open-registration', '--data-dir', join(dir, 'data'), '--listen', `127.0.0.1:${apiPort}`, '--log-level', 'warn',
  '--base-domain', BASE_DOMAIN, '--proxy-listen', `127.0.0.1:${httpPort}`, '--tls', 'on', '--proxy-https-listen', `127.0.0.1:${httpsPort}`,
  '--acme-ca', pebble.directory, '--acme-ca-root', pebble.serverCertFile, '--sandbox', process.env.BENCH_SANDBOX ?? 'auto',
]);
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}` });
const reg = await anon.register({ name: 'bench-tls', email: 'bench-tls@x.io' });
const c = anon.withKey(reg.api_key);
let stopNginx = () => {};
process.on('exit', () => stopNginx());
const problems: string[] = [];
try {
  // 1. New hosts: routed, then the first HTTPS answer.
  const firstAnswer: number[] = [];
  const ordersBefore = pebble.orders();
  let host = '';
  let serviceId = '';
  for (let i = 0; i < NEW_HOSTS; i++) {
    const s = await c.createService({ name: `tls-${i}`, image: UPSTREAM_IMAGE });
    host = `${s.dns_label}.${BASE_DOMAIN}`;
    serviceId = s.id;
    while ((await c.service(s.id)).status !== 'running') await new Promise((r) => setTimeout(r, 5));
    // Routed to the container: its <id>.localhost host answers on plain HTTP (the base-domain one redirects).
    while ((await plainStatus(httpPort, `${s.id}.localhost`)) !== 200) await new Promise((r) => setTimeout(r, 2));
    const first = await httpsGet(httpsPort, host, pebble.issuerRoot);
    if (first.status !== 200 || first.body !== UPSTREAM_BODY) throw new Error(`the first HTTPS answer of ${host}: ${first.status} ${first.body}`);
    firstAnswer.push(first.ms);
    // The last one stays for the rest of the run (a tenant has 5 services).
    if (i < NEW_HOSTS - 1) await c.deleteService(s.id);
  }
  if (pebble.orders() - ordersBefore !== NEW_HOSTS) problems.push(`${pebble.orders() - ordersBefore} orders for ${NEW_HOSTS} new hosts`);

  // 2. The last host again, with its certificate: a handshake and a request each time.
  const cached: number[] = [];
  for (let i = 0; i < CACHED_ROUNDS; i++) cached.push((await httpsGet(httpsPort, host, pebble.issuerRoot)).ms);

  // 3. Throughput: svc's Caddy against nginx terminating TLS for the same upstream container.
  const ip = Object.values((await docker.getContainer(workloadName(serviceId)).inspect()).NetworkSettings.Networks)[0]?.IPAddress;
  if (!ip) throw new Error('the upstream container has no address');
  const cert = join(dir, 'nginx-cert.pem');
  const key = join(dir, 'nginx-key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', `/CN=${host}`, '-addext', `subjectAltName=DNS:${host}`], { stdio: 'ignore' });
  stopNginx = startNginx(dir, nginxPort, `${ip}:8000`, { cert, key });
  await new Promise((r) => setTimeout(r, 500));
  const targets = { svc: () => h2load(httpsPort, host), nginx: () => h2load(nginxPort, host) };
  const names = Object.keys(targets) as Array<keyof typeof targets>;
  for (const name of names) await targets[name](); // warm-up
  const runs: Record<keyof typeof targets, Array<{ rps: number; meanMs: number }>> = { svc: [], nginx: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length]!;
      runs[name].push(await targets[name]());
    }
    process.stderr.write(`bench-tls: round ${r + 1}/${ROUNDS}: ${names.map((n) => `${n} ${Math.round(runs[n].at(-1)!.rps)} req/s`).join(', ')}\n`);
  }
  const fig = (n: keyof typeof targets) => ({ rps: median(runs[n].map((x) => x.rps)), mean: median(runs[n].map((x) => x.meanMs)) });
  const [svc, nginx] = [fig('svc'), fig('nginx')];

  console.log(`\n| HTTPS through svc's proxy (pebble as the CA) | median | max |\n|---|---|---|`);
  console.log(`| new host: routed -> first HTTPS answer, ACME order included (${NEW_HOSTS} hosts) | ${median(firstAnswer).toFixed(0)} ms | ${Math.max(...firstAnswer).toFixed(0)} ms |`);
  console.log(`| host with its certificate: new TLS connection + request (${CACHED_ROUNDS}) | ${median(cached).toFixed(1)} ms | ${Math.max(...cached).toFixed(1)} ms |`);
  console.log(`\n| h2load --h1 -c${CONNECTIONS} -D${SECONDS}, median of ${ROUNDS} | req/s | mean ms |\n|---|---|---|`);
  console.log(`| svc (Caddy, certificate on demand, routed by Host) | ${Math.round(svc.rps)} | ${svc.mean.toFixed(2)} |`);
  console.log(`| nginx terminating TLS, keep-alive upstream | ${Math.round(nginx.rps)} | ${nginx.mean.toFixed(2)} |`);
  console.log(`| svc / nginx | ${(svc.rps / nginx.rps).toFixed(2)} | ${(svc.mean / nginx.mean).toFixed(2)} |`);
  problems.push(...sampleProblems('first HTTPS answer', firstAnswer, NEW_HOSTS), ...sampleProblems('cached', cached, CACHED_ROUNDS));
  for (const name of names) problems.push(...sampleProblems(`${name} req/s`, runs[name].map((x) => x.rps), ROUNDS));
} finally {
  stopNginx();
  await svcd.stop();
  await pebble.stop();
  await removeTenantWorkloads([reg.tenant_id]);
  rmSync(dir, { recursive: true, force: true });
}
if (SMOKE) smokeVerdict('bench-tls', problems);
else if (problems.length) console.log(`bench-tls: ${problems.join('; ')}`);
