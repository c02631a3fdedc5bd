// A real ACME server for the HTTPS tests: Debian's pebble (RFC 8555, made for tests), with
// pebble-challtestsrv as its DNS (every name is 127.0.0.1), so each challenge is really
// validated against svc's Caddy on the ports given. Its own HTTPS uses a certificate made here
// with openssl (Caddy trusts it as --acme-ca-root); what it issues chains to a root read from its
// management API.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'node:https';
import { request as httpRequest } from 'node:http';
import { freePort, waitFor } from './harness.js';

/** pebble-challtestsrv as a DNS server: every name is 127.0.0.1, TXT records as the test sets them. */
export interface TestDns {
  /** IP:port, for pebble -dnsserver and svcd's --dns-server. */
  server: string;
  setTxt(name: string, value: string): Promise<void>;
  clearTxt(name: string): Promise<void>;
  /** Answers `name` with this IPv4 address instead of 127.0.0.1. */
  setA(name: string, address: string): Promise<void>;
  /** Back to 127.0.0.1. */
  clearA(name: string): Promise<void>;
  stop(): Promise<void>;
}

export async function startDns(): Promise<TestDns> {
  const [dnsPort, managementPort] = [await freePort(), await freePort()];
  const child = spawn('pebble-challtestsrv', ['-defaultIPv4', '127.0.0.1', '-defaultIPv6', '', '-dns01', `127.0.0.1:${dnsPort}`, '-http01', '', '-https01', '', '-tlsalpn01', '', '-management', `127.0.0.1:${managementPort}`], { stdio: 'ignore' });
  // Its management API names hosts fully qualified (with the trailing dot).
  const manage = (path: string, body: unknown) => post(`http://127.0.0.1:${managementPort}${path}`, JSON.stringify(body));
  await waitFor('pebble-challtestsrv', () => manage('/clear-txt', { host: 'ready.test.' }).then(() => true).catch(() => undefined));
  return {
    server: `127.0.0.1:${dnsPort}`,
    setTxt: (name, value) => manage('/set-txt', { host: `${name}.`, value }),
    clearTxt: (name) => manage('/clear-txt', { host: `${name}.` }),
    setA: (name, address) => manage('/add-a', { host: `${name}.`, addresses: [address] }),
    clearA: (name) => manage('/clear-a', { host: `${name}.` }),
    stop: () => stopChild(child),
  };
}

export interface Pebble {
  /** The ACME directory URL. */
  directory: string;
  /** The certificate of pebble's own HTTPS (what --acme-ca-root names). */
  serverCertFile: string;
  /** The root its issued certificates chain to (PEM). */
  issuerRoot: string;
  /** Orders it has taken so far (from its log). */
  orders(): number;
  /** Certificates it has issued so far (from its log). */
  issued(): number;
  /** ACME accounts it has made so far (from its log). */
  accounts(): number;
  /** What it logged so far (for a failing test's message). */
  log(): string;
  /** Its DNS, where tests set TXT records. */
  dns: TestDns;
  stop(): Promise<void>;
}

/** `validitySeconds`: how long the certificates it issues last (pebble's default: 5 years). */
export async function startPebble(ports: { http: number; tls: number }, o: { validitySeconds?: number } = {}): Promise<Pebble> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-pebble-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
  const [acmePort, managementPort] = [await freePort(), await freePort()];
  const dns = await startDns();
  writeFileSync(
    join(dir, 'pebble.json'),
    JSON.stringify({ pebble: { listenAddress: `127.0.0.1:${acmePort}`, managementListenAddress: `127.0.0.1:${managementPort}`, certificate: cert, privateKey: key, httpPort: ports.http, tlsPort: ports.tls, ocspResponderURL: '', externalAccountBindingRequired: false, ...(o.validitySeconds ? { certificateValidityPeriod: o.validitySeconds } : {}) } }),
  );
  let log = '';
  // No random validation delays, no bad-nonce rejections: a test waits for validation only.
  const pebble = spawn('pebble', ['-config', join(dir, 'pebble.json'), '-dnsserver', dns.server], { env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
  pebble.stdout.on('data', (d: Buffer) => (log += d.toString()));
  pebble.stderr.on('data', (d: Buffer) => (log += d.toString()));
  const ca = readFileSync(cert);
  const issuerRoot = await waitFor('pebble', () => get(`https://127.0.0.1:${managementPort}/roots/0`, ca).catch(() => undefined));
  return {
    directory: `https://127.0.0.1:${acmePort}/dir`,
    serverCertFile: cert,
    issuerRoot,
    orders: () => (log.match(/Added order /g) ?? []).length,
    issued: () => (log.match(/Issued certificate serial /g) ?? []).length,
    accounts: () => (log.match(/There are now \d+ accounts in memory/g) ?? []).length,
    log: () => log,
    dns,
    stop: async () => {
      await stopChild(pebble);
      await dns.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function stopChild(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGTERM');
  await exited;
}

function post(url: string, body: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', headers: { 'content-type': 'application/json' }, timeout: 2_000 }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${url}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function get(url: string, ca: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    request(url, { agent: new Agent({ ca }), timeout: 2_000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${url}: ${res.statusCode}`))));
    })
      .on('error', reject)
      .end();
  });
}
