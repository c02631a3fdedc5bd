// Git repositories the build tests create, served by Debian's `git daemon` on loopback.
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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

function repo(base: string, name: string): (args: string[]) => string {
  const dir = join(base, name);
  mkdirSync(dir, { recursive: true });
  const git = (args: string[]) => execFileSync('git', args, { cwd: dir, encoding: 'utf8', env: { ...process.env, ...author, GIT_CONFIG_NOSYSTEM: '1', HOME: base } }).trim();
  git(['init', '-q', '-b', 'main']);
  // Fetching a commit by its SHA (source_ref = SHA) is allowed only when the server says so.
  git(['config', 'uploadpack.allowAnySHA1InWant', 'true']);
  return git;
}

function commit(base: string, name: string, git: (args: string[]) => string, files: Record<string, string>, message: string): string {
  for (const [f, body] of Object.entries(files)) writeFileSync(join(base, name, f), body);
  git(['add', '-A']);
  git(['commit', '-q', '-m', message]);
  return git(['rev-parse', 'HEAD']);
}

/** Builds on the local test image: no registry is reachable, and none is needed. */
const dockerfile = (...steps: string[]) => [`FROM ${BUSYBOX_IMAGE}`, ...steps].join('\n') + '\n';

export async function startGitServer(): Promise<GitServer> {
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
