// Shallow clone of one ref with Debian's git, under a size limit; the caller's signal (cancel,
// time limit) kills git at once. git runs with no user or system configuration, never prompts,
// follows no redirects (a redirect could lead to an address the source check refused) and
// speaks only the protocols a source may use. It is given a checked source (sources.ts), never a
// tenant's string: the URL rebuilt from the parsed parts, its host pinned to the checked addresses.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Timers } from '../clock.js';
import type { CheckedSource } from './sources.js';

export interface CloneOptions {
  /** From checkSourceUrl, run just before: git connects only to the addresses it checked. */
  source: CheckedSource;
  /** Branch, tag or commit SHA; null for the remote's default branch. */
  ref: string | null;
  /** An empty directory to clone into. */
  dir: string;
  maxBytes: number;
  /** Aborting kills git. */
  signal: AbortSignal;
  timers: Timers;
  /** A CA bundle for HTTPS sources (the system's plus --git-ca-file); null: the system's. */
  caBundle?: string | null;
  /**
   * The checkout is a repository the tenant works in (an environment's sync): its remote fetches
   * every branch and follows tags, as after a plain clone. A build's clone needs neither.
   */
  trackAllBranches?: boolean;
  onOutput(line: string): void;
}

const FULL_SHA = /^[0-9a-f]{40}$/;
const SHORT_SHA = /^[0-9a-f]{7,39}$/;
/** A whole object id: SHA-1, or SHA-256 in a repository of that format. */
const OBJECT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const SIZE_CHECK_MS = 500;

export class CloneError extends Error {}

/** Clones `ref` of the source into `dir`; resolves to the commit SHA checked out. */
export async function cloneAt(opts: CloneOptions): Promise<string> {
  const git = (args: string[], quiet = false) => runGit(opts.dir, args, opts, quiet);
  const ref = opts.ref;
  if (ref === null || isBranchOrTagName(ref)) {
    // A branch or a tag (or the default branch): one git process, as a person clones by hand
    // (a branch and a tag of one name: the branch, as git clone picks). Its remote is written by
    // git (no configuration text is made here from a tenant's URL). `--` ends the options: the
    // pinned URL is svc's own, and a ref was checked not to start with '-' (sources.ts).
    const tags = opts.trackAllBranches ? [] : ['--no-tags'];
    await git(['clone', '--progress', '--depth', '1', ...tags, ...(ref === null ? [] : ['--branch', ref]), '--', opts.source.pinned.url, '.']).catch((err: unknown) => {
      if (ref !== null && err instanceof CloneError && /not found in upstream|Remote branch .* not found/i.test(err.message)) {
        throw new CloneError(`ref ${ref} not found in ${opts.source.url}`);
      }
      throw err;
    });
    // A shallow clone fetches only its branch from then on; a tenant's checkout fetches them all.
    if (opts.trackAllBranches) await git(['remote', 'set-branches', 'origin', '*']);
    return headCommit(opts.dir, () => git(['rev-parse', 'HEAD'], true));
  }
  await git(['init', '-q', '.']);
  // A synced environment's checkout is a repository the tenant fetches from and pushes to: it
  // keeps its remote (git writes it; no configuration text is made here from a tenant's URL).
  await git(['remote', 'add', 'origin', opts.source.pinned.url]);

  if (SHORT_SHA.test(ref)) {
    // An abbreviated SHA cannot be fetched by name: fetch the history, then look it up.
    await git(['fetch', '--progress', '--no-tags', 'origin', '+refs/heads/*:refs/remotes/origin/*', '+refs/tags/*:refs/tags/*']);
    await git(['checkout', '-q', '--detach', ref]).catch(() => {
      throw new CloneError(`commit ${ref} not found in ${opts.source.url}`);
    });
  } else {
    try {
      await git(['fetch', '--progress', '--depth', '1', '--no-tags', 'origin', ref]);
    } catch (err) {
      // Servers that do not allow fetching a commit by its SHA: fetch the history instead.
      if (!FULL_SHA.test(ref) || opts.signal.aborted) throw err;
      opts.onOutput(`shallow fetch of ${ref} refused by the server; fetching the history`);
      await git(['fetch', '--progress', '--no-tags', 'origin', '+refs/heads/*:refs/remotes/origin/*', '+refs/tags/*:refs/tags/*']);
    }
    await git(['checkout', '-q', '--detach', FULL_SHA.test(ref) ? ref : 'FETCH_HEAD']).catch(() => {
      throw new CloneError(`ref ${ref} not found in ${opts.source.url}`);
    });
  }
  return headCommit(opts.dir, () => git(['rev-parse', 'HEAD'], true));
}

/**
 * A ref that `git clone --branch` takes: not a commit id (nor what may be an abbreviated one),
 * not HEAD, not a full ref name (refs/tags/v1, refs/pull/7/head), which only a fetch resolves.
 */
function isBranchOrTagName(ref: string): boolean {
  return !SHORT_SHA.test(ref) && !FULL_SHA.test(ref) && ref !== 'HEAD' && !ref.startsWith('refs/');
}

/**
 * The commit checked out, read from the files git wrote (not the repository's own): a detached
 * HEAD holds its id, a branch's HEAD names the branch's loose ref file, which holds it. Anything
 * else (a packed ref) is asked of git; each git process costs tens of milliseconds.
 */
async function headCommit(dir: string, askGit: () => Promise<string>): Promise<string> {
  const head = (await readFile(join(dir, '.git', 'HEAD'), 'utf8')).trim();
  if (OBJECT_ID.test(head)) return head;
  const branch = /^ref: (refs\/heads\/[^\s]+)$/.exec(head)?.[1];
  // A branch name has no '..' component (git refuses one), so the path stays under .git.
  if (branch !== undefined && !branch.split('/').includes('..')) {
    const id = await readFile(join(dir, '.git', branch), 'utf8').then((t) => t.trim(), () => '');
    if (OBJECT_ID.test(id)) return id;
  }
  return (await askGit()).trim();
}

/**
 * The `-c` options of every git run: only the source's protocols, no redirects, no proxy, the
 * source's pinned addresses (curl's resolve list for a name over http(s)).
 */
export function gitSettings(source: CheckedSource, caBundle?: string | null): string[] {
  return [
    '-c', 'protocol.allow=never',
    '-c', 'protocol.https.allow=always',
    '-c', 'protocol.git.allow=always',
    // Reaches git only for loopback sources: the source check refuses http:// otherwise.
    '-c', 'protocol.http.allow=always',
    '-c', 'http.followRedirects=false',
    // No proxy: it would make the connection, to wherever it resolves the name. git's environment
    // carries no proxy variables and no configuration file is read; these say it outright.
    '-c', 'http.proxy=',
    '-c', 'core.gitProxy=none',
    ...source.pinned.gitConfig.flatMap((setting) => ['-c', setting]),
    '-c', 'advice.detachedHead=false',
    ...(caBundle ? ['-c', `http.sslCAInfo=${caBundle}`] : []),
  ];
}

async function runGit(cwd: string, args: string[], opts: CloneOptions, quiet: boolean): Promise<string> {
  const config = gitSettings(opts.source, opts.caBundle);
  const child = spawn('git', [...config, ...args], {
    cwd,
    signal: opts.signal,
    killSignal: 'SIGKILL',
    // Only these variables: nothing of svcd's environment (http_proxy, GIT_PROXY_COMMAND, GIT_SSH,
    // GIT_CONFIG_*, GIT_DIR, LD_PRELOAD...) reaches git, curl or the dynamic loader.
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: cwd, GIT_TERMINAL_PROMPT: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', LANG: 'C' },
  });
  let stdout = '';
  let lastErr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => {
    // Progress lines end in \r: keep the last state of each, not every percent.
    for (const line of b.toString().split(/\r?\n/)) {
      const text = line.split('\r').filter(Boolean).at(-1)?.trim();
      if (!text) continue;
      lastErr = text;
      if (!quiet) opts.onOutput(text);
    }
  });

  // The size limit: checked while git writes, so a huge repository is stopped early.
  let tooLarge = false;
  const sizeCheck = opts.timers.setInterval(() => {
    void directorySize(cwd).then((bytes) => {
      if (bytes > opts.maxBytes && child.exitCode === null) {
        tooLarge = true;
        child.kill('SIGKILL');
      }
    }, () => {});
  }, SIZE_CHECK_MS);

  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      child.on('error', (err) => (opts.signal.aborted ? reject(opts.signal.reason instanceof Error ? opts.signal.reason : err) : reject(err)));
      child.on('close', resolve);
    });
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by the size check's timer while git ran
    if (tooLarge) throw new CloneError(`repository is larger than ${Math.round(opts.maxBytes / 1024 / 1024)} MB`);
    if (code !== 0) throw new CloneError(`git ${args[0]} failed: ${lastErr || `exit code ${code}`}`);
    return stdout;
  } finally {
    sizeCheck.cancel();
  }
}

/** Bytes of the files under `dir` (symlinks counted as links, not followed). */
export async function directorySize(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += await directorySize(path);
    else total += (await lstat(path)).size;
  }
  return total;
}

/** Debian's bundle of the system's trusted CAs. */
const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/**
 * git's http.sslCAInfo replaces the trusted CAs, so an operator's extra CA (--git-ca-file) goes
 * into a bundle with the system's: public HTTPS sources keep working. Returns its path.
 */
export function writeCaBundle(dataDir: string, extraCaFile: string): string {
  const path = join(dataDir, 'git-ca-bundle.pem');
  const system = existsSync(SYSTEM_CA_BUNDLE) ? readFileSync(SYSTEM_CA_BUNDLE, 'utf8') : '';
  writeFileSync(path, `${system}\n${readFileSync(extraCaFile, 'utf8')}\n`, { mode: 0o644 });
  return path;
}
