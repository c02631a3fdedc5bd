// Packs a directory into the gzipped tar `svc deploy` uploads: what Docker would send as the build
// context. `.dockerignore` is honoured with Docker's own rules (@balena/dockerignore, a port of
// Docker's matcher: patterns anchored at the root, `**`, `!` exceptions); without one,
// the directory's top-level `.gitignore` with git's (the `ignore` package: a pattern matches at
// any depth). As the Docker CLI, the Dockerfile and .dockerignore at the root are sent even when
// the ignore file lists them. `.git` (any, a submodule's too) is never sent: it is not part of
// what is built and is often the largest thing in a directory.
// Symlinks go as symlinks (svc refuses those that point out of the directory, so they are refused
// here first, with their name); other special files are left out with a note.
//
// Synchronous on purpose: every asynchronous file call and every chunk of a zlib stream is a round
// trip through libuv's thread pool, which the first one also starts, and for the few files of a
// typical app those hops were most of the pack's time: 17-19 ms of `svc deploy`'s start for the
// three files of examples/hello, before anything could be created (2026-12-03, bench/build), about
// 7 ms read and compressed in place; the tar itself is written in place too (tar-blocks.ts). The
// command waits for the archive anyway; the one thing beside it, the service's lookup, is sent
// before the pack begins (commands/deploy.ts). The compressed archive stays bounded as
// it was: the tar is compressed a MEMBER_BYTES batch at a time, each batch a gzip member of its
// own (RFC 1952 allows several, and gunzip, Node's and svcd's included, reads them as one
// stream), and the cap is checked after each.
import { lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join, posix, relative, sep } from 'node:path';
import { gzipSync } from 'node:zlib';
import dockerignoreModule from '@balena/dockerignore';
import gitignore from 'ignore';
import { archiveEnd, contentPadding, entryHeader, type TarEntry } from './tar-blocks.js';

export interface PackedDirectory {
  archive: Buffer;
  files: number;
  /** The files' bytes, unpacked. */
  bytes: number;
  /** Which ignore file applied, if any. */
  ignoreFile: '.dockerignore' | '.gitignore' | null;
  /** Entries left out because they are neither files, directories nor symlinks. */
  skipped: string[];
}

// @balena/dockerignore is CommonJS (module.exports = the factory) typed with a default export;
// under NodeNext the import is the factory itself at run time.
const dockerignore = ((dockerignoreModule as unknown as { default?: typeof dockerignoreModule.default }).default ??
  dockerignoreModule) as unknown as typeof dockerignoreModule.default;

/** Why a directory cannot be deployed as it is: told to the user as is. */
export class PackError extends Error {}

/** Sent whatever the ignore file says, as the Docker CLI does: the build needs them. */
const ALWAYS_SENT = new Set(['Dockerfile', '.dockerignore']);

/** Whether a path (relative, with `/`) is left out. */
type Ignored = (path: string, isDirectory: boolean) => boolean;

/** Tar bytes compressed into one gzip member: the dictionary restarts at each, which costs next to nothing at this size. */
const MEMBER_BYTES = 1024 * 1024;

function ignoreRules(dir: string): { ignored: Ignored; file: PackedDirectory['ignoreFile']; exceptions: boolean } {
  const read = (name: string) => {
    try {
      return readFileSync(join(dir, name), 'utf8');
    } catch {
      return null;
    }
  };
  const docker = read('.dockerignore');
  if (docker !== null) {
    const rules = dockerignore().add(docker.split(/\r?\n/));
    return { ignored: (p) => rules.ignores(p), file: '.dockerignore', exceptions: /^\s*!/m.test(docker) };
  }
  const git = read('.gitignore');
  if (git !== null) {
    const rules = gitignore().add(git);
    // git's rules tell a directory by a trailing slash.
    return { ignored: (p, isDirectory) => rules.ignores(isDirectory ? `${p}/` : p), file: '.gitignore', exceptions: /^\s*!/m.test(git) };
  }
  return { ignored: () => false, file: null, exceptions: false };
}

/**
 * The directory as a gzipped tar, at most `maxBytes` compressed (PackError past it, before the
 * whole directory is read), with no file over `maxUnpackedBytes`.
 */
export function packDirectory(dir: string, maxBytes: number, maxUnpackedBytes: number): PackedDirectory {
  const rules = ignoreRules(dir);
  /** The gzip members so far, and their bytes. */
  const members: Buffer[] = [];
  let size = 0;
  /** Tar output not compressed yet (less than MEMBER_BYTES, but at the end). */
  const pending: Buffer[] = [];
  let pendingBytes = 0;
  /**
   * The next `n` pending bytes. A piece within one buffer is a view of it, not a copy: a large
   * file comes as one buffer, and a copy of all of it would hold it twice in memory.
   */
  const takePiece = (n: number): Buffer => {
    const first = pending[0] as Buffer;
    pendingBytes -= n;
    if (first.length >= n) {
      if (first.length === n) pending.shift();
      else pending[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const piece = Buffer.allocUnsafe(n);
    for (let at = 0; at < n; ) {
      const c = pending[0] as Buffer;
      const k = Math.min(c.length, n - at);
      c.copy(piece, at, 0, k);
      at += k;
      if (k === c.length) pending.shift();
      else pending[0] = c.subarray(k);
    }
    return piece;
  };
  /** Compresses the pending tar a MEMBER_BYTES piece at a time (`all`: the rest too), checking the cap after each. */
  const compressPending = (all: boolean): void => {
    while (pendingBytes >= MEMBER_BYTES || (all && pendingBytes > 0)) {
      const member = gzipSync(takePiece(Math.min(MEMBER_BYTES, pendingBytes)));
      size += member.length;
      if (size > maxBytes) throw new PackError(`the directory packs to more than ${Math.round(maxBytes / 1024 ** 2)} MB: leave out what the build does not need with a .dockerignore`);
      members.push(member);
    }
    // What is left (less than a piece) copied out of a large buffer, so that the buffer can go.
    const rest = pending[0];
    if (pending.length === 1 && rest !== undefined && rest.buffer.byteLength > 2 * MEMBER_BYTES) pending[0] = Buffer.from(rest);
  };
  /** One buffer onto the tar, compressed as members fill: a file's content on its own, so that its tail is copied out (compressPending) and the file's buffer can go before the next is read. */
  const write = (b: Buffer) => {
    if (b.length === 0) return;
    pending.push(b);
    pendingBytes += b.length;
    compressPending(false);
  };
  const entry = (e: TarEntry, content?: Buffer) => {
    for (const block of entryHeader(e)) write(block);
    if (content === undefined) return;
    write(content);
    write(contentPadding(content.length));
  };
  const result: PackedDirectory = { archive: Buffer.alloc(0), files: 0, bytes: 0, ignoreFile: rules.file, skipped: [] };

  const walk = (at: string): void => {
    const names = readdirSync(at).sort();
    for (const name of names) {
      const full = join(at, name);
      const rel = relative(dir, full).split(sep).join('/');
      if (name === '.git') continue; // the repository's, or a submodule's (a file there)
      const info = lstatSync(full);
      if (info.isDirectory()) {
        // An ignored directory is not entered, unless an exception could take something back from it.
        if (rules.ignored(rel, true) && !rules.exceptions) continue;
        if (!rules.ignored(rel, true)) entry({ name: `${rel}/`, type: 'directory', mode: 0o755, mtime: info.mtime, size: 0 });
        walk(full);
      } else if (rules.ignored(rel, false) && !ALWAYS_SENT.has(rel)) {
        continue;
      } else if (info.isFile()) {
        if (info.size > maxUnpackedBytes) throw new PackError(`${rel} is larger than ${Math.round(maxUnpackedBytes / 1024 ** 2)} MB, more than svc builds from: add it to .dockerignore`);
        // Its bytes as read (a file that changed size since its lstat goes as it is now).
        const content = readFileSync(full);
        entry({ name: rel, type: 'file', mode: info.mode & 0o111 ? 0o755 : 0o644, mtime: info.mtime, size: content.length }, content);
        result.files++;
        result.bytes += content.length;
      } else if (info.isSymbolicLink()) {
        const target = readlinkSync(full);
        const resolved = posix.normalize(posix.join(posix.dirname(rel), target));
        if (target.startsWith('/') || resolved === '..' || resolved.startsWith('../')) {
          throw new PackError(`${rel} is a symlink to ${target}, outside the directory: svc builds only what is inside it (copy the file in, or add the link to .dockerignore)`);
        }
        entry({ name: rel, type: 'symlink', linkname: target, mode: 0o777, mtime: info.mtime, size: 0 });
      } else {
        result.skipped.push(rel);
      }
    }
  };
  walk(dir);
  write(archiveEnd());
  compressPending(true);
  result.archive = Buffer.concat(members);
  return result;
}
