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
import { freePort, waitFor } from './harness.js';

export interface Pebble {
  /** The ACME directory URL. */
  directory: string;
  /** The certificate of pebble's own HTTPS (what --acme-ca-root names). */
  serverCertFile: string;
  /** The root its issued certificates chain to (PEM). */
  issuerRoot: string;
  /** Orders it has taken so far (from its log). */
  orders(): number;
  stop(): Promise<void>;
}

export async function startPebble(ports: { http: number; tls: number }): Promise<Pebble> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-pebble-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
  const [acmePort, managementPort, dnsPort, challManagementPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  writeFileSync(
    join(dir, 'pebble.json'),
    JSON.stringify({ pebble: { listenAddress: `127.0.0.1:${acmePort}`, managementListenAddress: `127.0.0.1:${managementPort}`, certificate: cert, privateKey: key, httpPort: ports.http, tlsPort: ports.tls, ocspResponderURL: '', externalAccountBindingRequired: false } }),
  );
  const children: ChildProcess[] = [];
  const dns = spawn('pebble-challtestsrv', ['-defaultIPv4', '127.0.0.1', '-defaultIPv6', '', '-dns01', `127.0.0.1:${dnsPort}`, '-http01', '', '-https01', '', '-tlsalpn01', '', '-management', `127.0.0.1:${challManagementPort}`], { stdio: 'ignore' });
  children.push(dns);
  let log = '';
  // No random validation delays, no bad-nonce rejections: a test waits for validation only.
  const pebble = spawn('pebble', ['-config', join(dir, 'pebble.json'), '-dnsserver', `127.0.0.1:${dnsPort}`], { env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
  pebble.stdout.on('data', (d: Buffer) => (log += d.toString()));
  pebble.stderr.on('data', (d: Buffer) => (log += d.toString()));
  children.push(pebble);
  const ca = readFileSync(cert);
  const issuerRoot = await waitFor('pebble', () => get(`https://127.0.0.1:${managementPort}/roots/0`, ca).catch(() => undefined));
  return {
    directory: `https://127.0.0.1:${acmePort}/dir`,
    serverCertFile: cert,
    issuerRoot,
    orders: () => (log.match(/Added order /g) ?? []).length,
    stop: async () => {
      for (const c of children) {
        if (c.exitCode !== null || c.signalCode !== null) continue;
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
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
