// Git repositories the build and environment tests create, served on loopback by Debian's
// `git daemon`, or over HTTPS by `git http-backend` behind node's https server with a
// certificate made for the run (its CA goes to svcd's --git-ca-file).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { freePort } from './harness.js';
import { BUSYBOX_IMAGE } from './images.js';

export interface GitServer {
  /** git://127.0.0.1:PORT/<name> */
  url(name: string): string;
  /** Commits of the `app` repository by what they hold. */
  shas: { v1: string; v2: string; feature: string };
  stop(): Promise<void>;
}

const author = { GIT_AUTHOR_NAME: 'svc test', GIT_AUTHOR_EMAIL: 't@x.io', GIT_COMMITTER_NAME: 'svc test', GIT_COMMITTER_EMAIL: 't@x.io' };

/** A new repository `name` under `base`; returns a git runner in it. */
export function repo(base: string, name: string): (args: string[]) => string {
  const dir = join(base, name);
  mkdirSync(dir, { recursive: true });
  const git = (args: string[]) => execFileSync('git', args, { cwd: dir, encoding: 'utf8', env: { ...process.env, ...author, GIT_CONFIG_NOSYSTEM: '1', HOME: base } }).trim();
  git(['init', '-q', '-b', 'main']);
  // Fetching a commit by its SHA (source_ref = SHA) is allowed only when the server says so.
  git(['config', 'uploadpack.allowAnySHA1InWant', 'true']);
  return git;
}

/** Writes `files` into the repository and commits them; returns the commit SHA. */
export function commit(base: string, name: string, git: (args: string[]) => string, files: Record<string, string>, message: string): string {
  for (const [f, body] of Object.entries(files)) writeFileSync(join(base, name, f), body);
  git(['add', '-A']);
  git(['commit', '-q', '-m', message]);
  return git(['rev-parse', 'HEAD']);
}

/** Builds on the test image, pulled from the tests' loopback registry as a tenant's FROM is. */
export const dockerfile = (...steps: string[]) => [`FROM ${BUSYBOX_IMAGE}`, ...steps].join('\n') + '\n';

/** `extra`: more repositories to serve, by name, each one commit of the files given. */
export async function startGitServer(extra: Record<string, Record<string, string>> = {}): Promise<GitServer> {
  const base = mkdtempSync(join(tmpdir(), 'svc-git-'));
  // app: v1 (tagged v1), then v2 on main; a feature branch from v1.
  const app = repo(base, 'app');
  const v1 = commit(base, 'app', app, { Dockerfile: dockerfile('COPY index.html /www/index.html'), 'index.html': 'v1 from git\n' }, 'v1');
  app(['tag', 'v1']);
  app(['checkout', '-q', '-b', 'feature']);
  const feature = commit(base, 'app', app, { 'index.html': 'feature branch\n' }, 'feature');
  app(['checkout', '-q', 'main']);
  const v2 = commit(base, 'app', app, { 'index.html': 'v2 from git\n' }, 'v2');

  const broken = repo(base, 'broken');
  commit(base, 'broken', broken, { Dockerfile: dockerfile('RUN echo about to fail && exit 7') }, 'broken');
  const slow = repo(base, 'slow');
  commit(base, 'slow', slow, { Dockerfile: dockerfile('RUN echo slow step starting && sleep 120') }, 'slow');
  const noDockerfile = repo(base, 'no-dockerfile');
  commit(base, 'no-dockerfile', noDockerfile, { 'README': 'nothing to build\n' }, 'readme');
  for (const [name, files] of Object.entries(extra)) commit(base, name, repo(base, name), files, name);

  const port = await freePort();
  const daemon = spawn('git', ['daemon', '--reuseaddr', '--export-all', `--base-path=${base}`, '--listen=127.0.0.1', `--port=${port}`, base], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((res) => {
      const s = connect(port, '127.0.0.1', () => {
        s.destroy();
        res(true);
      }).on('error', () => res(false));
    });
    if (up) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: (name) => `git://127.0.0.1:${port}/${name}`,
    shas: { v1, v2, feature },
    stop: async () => {
      daemon.kill('SIGTERM');
      rmSync(base, { recursive: true, force: true });
    },
  };
}

/** A request handler serving the repositories under `projectRoot` through `git http-backend` (CGI). */
export function gitHttpBackend(projectRoot: string): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    // CGI: the request as environment variables and stdin; headers, a blank line, then the body.
    const url = new URL(req.url ?? '/', 'https://git');
    const cgi = spawn('git', ['http-backend'], {
      env: {
        PATH: process.env.PATH,
        GIT_PROJECT_ROOT: projectRoot,
        GIT_HTTP_EXPORT_ALL: '1',
        GIT_CONFIG_NOSYSTEM: '1',
        HOME: projectRoot,
        REQUEST_METHOD: req.method ?? 'GET',
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        HTTP_CONTENT_ENCODING: req.headers['content-encoding'] ?? '',
        GIT_PROTOCOL: String(req.headers['git-protocol'] ?? ''),
        REMOTE_ADDR: '127.0.0.1',
      },
    });
    req.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    let inBody = false;
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (inBody) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      inBody = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString().split('\r\n')) {
        const [k, ...v] = line.split(':');
        if (!k) continue;
        if (k.toLowerCase() === 'status') status = Number.parseInt(v.join(':').trim(), 10);
        else res.setHeader(k, v.join(':').trim());
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.on('close', () => res.end());
  };
}

export interface HttpsGitServer {
  /** https://127.0.0.1:PORT/<name> */
  url(name: string): string;
  /** The certificate to trust (self-signed: it is its own CA). */
  caFile: string;
  /** Commits of the `project` repository: v1 (tagged v1) and v2 (main). */
  shas: { v1: string; v2: string };
  stop(): Promise<void>;
}

/** `project`: README and a script; v1 tagged, then v2 on main. Served by git http-backend over TLS. */
export async function startHttpsGitServer(): Promise<HttpsGitServer> {
  const base = mkdtempSync(join(tmpdir(), 'svc-https-git-'));
  const project = repo(base, 'project');
  const v1 = commit(base, 'project', project, { 'README.md': 'project v1\n', 'hello.sh': 'echo hello from v1\n' }, 'v1');
  project(['tag', 'v1']);
  const v2 = commit(base, 'project', project, { 'README.md': 'project v2\n', 'hello.sh': 'echo hello from v2\n' }, 'v2');

  const certDir = join(base, '.tls');
  mkdirSync(certDir);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(certDir, 'key.pem'), '-out', join(certDir, 'cert.pem')], { stdio: 'ignore' });

  const server = createHttpsServer({ key: readFileSync(join(certDir, 'key.pem')), cert: readFileSync(join(certDir, 'cert.pem')) }, gitHttpBackend(base));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (name) => `https://127.0.0.1:${port}/${name}`,
    caFile: join(certDir, 'cert.pem'),
    shas: { v1, v2 },
    stop: async () => {
      await new Promise((r) => server.close(r));
      rmSync(base, { recursive: true, force: true });
    },
  };
}
