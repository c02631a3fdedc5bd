// Source archives a tenant uploads to build from (issue 25): a tar, gzipped or not, read as a
// stream and judged entry by entry. The same reader checks an upload as it arrives (nothing is
// written; a bad archive is refused with the reason) and unpacks it into a build's scratch area
// when the build runs, checking again: only that second pass writes, and only what it has judged.
//
// The rules, for an archive svc treats as hostile until read:
// - names are relative and stay inside: no leading `/`, no `..` part, no NUL, at most 4096 bytes;
// - only regular files, directories, symlinks and hard links; devices and FIFOs are refused;
// - a symlink points inside the archive (relative, and not out through `..`), and nothing is
//   written through one (an entry below a symlink is refused: the classic `d -> /etc`, `d/passwd`);
// - a hard link names a regular file that came earlier in the archive;
// - a name appears once; modes are reduced to 0644 or 0755 (no setuid, setgid or sticky bits);
// - the unpacked size and the number of entries are capped, and so is what the decompressor may
//   produce (a gzip bomb stops at the cap, not at the disk's end).
// tar-stream (already svcd's, for build contexts) parses the format and bounds its own long-name
// and pax headers; these rules are svc's.
import { constants as fsConstants } from 'node:fs';
import { link, mkdir, open, symlink } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { once } from 'node:events';
import { pipeline, Readable, Transform, type TransformCallback } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { extract, type Extract, type Header } from 'tar-stream';
import { TooLargeError, ValidationError } from '../errors.js';

export interface ArchiveLimits {
  /** What the files may add up to, unpacked. */
  maxUnpackedBytes: number;
  maxEntries: number;
}

export interface ArchiveSummary {
  /** Regular files (hard links included). */
  files: number;
  unpackedBytes: number;
  /** A regular file named Dockerfile at the archive's root. */
  hasDockerfile: boolean;
}

const NAME_MAX_BYTES = 4096;
/** Tar headers and padding on top of the files' own bytes: what the decompressor may produce beyond them. */
const TAR_OVERHEAD_PER_ENTRY = 1536;
const GZIP_MAGIC = [0x1f, 0x8b];

/** Why an archive is refused: the tenant's mistake (or attack), told as a 400. */
export class ArchiveRefused extends ValidationError {}

/**
 * Reads the archive `input` to its end and checks every entry; with `into`, writes the entries
 * below that directory (which must exist and be empty). Rejects with ArchiveRefused (400) or
 * TooLargeError (413) on the first entry that breaks a rule, or with the signal's reason.
 */
export async function readArchive(input: AsyncIterable<Buffer>, limits: ArchiveLimits, into?: string, signal?: AbortSignal): Promise<ArchiveSummary> {
  signal?.throwIfAborted();
  const source = await sniffed(input);
  const abort = () => source.stream.destroy(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
  signal?.addEventListener('abort', abort, { once: true });
  const tar = extract();
  const cap = limits.maxUnpackedBytes + limits.maxEntries * TAR_OVERHEAD_PER_ENTRY;
  // The callback pipeline answers its last stream: a failure anywhere ends that stream's iteration with it.
  const noop = () => {};
  const decompressed = source.gzip ? pipeline(source.stream, createGunzip(), new ByteCap(cap), noop) : pipeline(source.stream, new ByteCap(cap), noop);
  const feeding = feed(decompressed, tar);
  // The feed's failure (a gzip error, the cap) ends the extract's iteration too; it is the one reported.
  feeding.catch(() => {});
  const judge = new EntryRules(limits);
  try {
    for await (const entry of tar) {
      const rule = judge.admit(entry.header);
      if (into === undefined || rule.kind === 'skip') await drain(entry);
      else await write(into, rule, entry as AsyncIterable<Buffer>);
    }
    await feeding;
  } catch (err) {
    if (err instanceof ArchiveRefused || err instanceof TooLargeError) {
      source.stream.destroy();
      throw err;
    }
    // The extract failed because its feed did (a gzip error, the cap, an abort): that is the cause.
    const cause = (await feeding.then(() => null, (e: unknown) => e)) ?? err;
    throw refusal(cause);
  } finally {
    signal?.removeEventListener('abort', abort);
  }
  return judge.summary();
}

/**
 * Writes the decompressed bytes into tar-stream's extractor with backpressure. By hand, not
 * pipeline(): tar-stream's streams are streamx streams, which Node's pipeline does not type.
 */
async function feed(from: AsyncIterable<Buffer>, tar: Extract): Promise<void> {
  try {
    for await (const chunk of from) {
      if (!tar.write(chunk)) await once(tar, 'drain');
    }
    // streamx types end() with a final chunk it does not need: none is written.
    tar.end(undefined);
  } catch (err) {
    tar.destroy(err as Error);
    throw err;
  }
}

/** Reads an entry's bytes to their end without keeping them. */
async function drain(entry: AsyncIterable<unknown>): Promise<void> {
  // eslint-disable-next-line @typescript-eslint/no-unused-vars -- read and dropped
  for await (const _ of entry);
}

function refusal(err: unknown): Error {
  if (err instanceof ArchiveRefused || err instanceof TooLargeError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if ((err as { code?: string }).code === 'Z_DATA_ERROR') return new ArchiveRefused(`the archive is not valid gzip: ${message}`);
  if (/tar header|Unexpected end|Header exceeds/i.test(message)) return new ArchiveRefused(`the body is not a tar archive (gzipped or not): ${message}`);
  return err instanceof Error ? err : new Error(message);
}

/** The input with its first bytes looked at: gzip is unpacked, anything else is read as tar. */
async function sniffed(input: AsyncIterable<Buffer>): Promise<{ stream: Readable; gzip: boolean }> {
  const it = input[Symbol.asyncIterator]();
  let first = Buffer.alloc(0);
  let ended = false;
  while (first.length < GZIP_MAGIC.length && !ended) {
    const next = await it.next();
    if (next.done === true) ended = true;
    else first = Buffer.concat([first, next.value]);
  }
  if (first.length === 0) throw new ArchiveRefused('the archive is empty');
  const gzip = GZIP_MAGIC.every((b, i) => first[i] === b);
  const rest = async function* (): AsyncGenerator<Buffer> {
    yield first;
    if (ended) return;
    for (;;) {
      const next = await it.next();
      if (next.done === true) return;
      yield next.value;
    }
  };
  return { stream: Readable.from(rest()), gzip };
}

/** Passes bytes on until `max`, then fails with 413. */
class ByteCap extends Transform {
  private seen = 0;
  constructor(private readonly max: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.max) done(new TooLargeError(`the archive unpacks to more than ${Math.round(this.max / 1024 ** 2)} MB`));
    else done(null, chunk);
  }
}

type Admitted =
  | { kind: 'skip' }
  | { kind: 'directory'; path: string }
  | { kind: 'file'; path: string; mode: number }
  | { kind: 'symlink'; path: string; target: string }
  | { kind: 'hardlink'; path: string; target: string };

/** The rules of the header above, entry by entry, with what they need to remember. */
class EntryRules {
  private readonly seen = new Set<string>();
  private readonly regularFiles = new Set<string>();
  private readonly symlinks = new Set<string>();
  private entries = 0;
  private files = 0;
  private bytes = 0;

  constructor(private readonly limits: ArchiveLimits) {}

  /** The header as tar-stream gives it; its types say every field is there, but a null linkname is what a decoded header without one has. */
  admit(h: Partial<Header> & Pick<Header, 'name'>): Admitted {
    if (++this.entries > this.limits.maxEntries) throw new ArchiveRefused(`the archive has more than ${this.limits.maxEntries} entries`);
    const path = cleanName(h.name);
    const type = h.type ?? 'file';
    if (path === '') {
      if (type === 'directory') return { kind: 'skip' }; // the root itself ("./")
      throw new ArchiveRefused(`an entry of type ${type} has no name`);
    }
    for (let parent = posix.dirname(path); parent !== '.'; parent = posix.dirname(parent)) {
      if (this.symlinks.has(parent)) throw new ArchiveRefused(`${path}: an entry inside the symlink ${parent} (nothing is written through a link)`);
      if (this.regularFiles.has(parent)) throw new ArchiveRefused(`${path}: ${parent} is a file, not a directory`);
    }
    if (this.seen.has(path)) {
      // A directory named twice (tar of a tree and of its subfolder) is harmless; anything else would overwrite.
      if (type === 'directory' && !this.regularFiles.has(path) && !this.symlinks.has(path)) return { kind: 'skip' };
      throw new ArchiveRefused(`${path} appears twice in the archive`);
    }
    this.seen.add(path);
    switch (type) {
      case 'directory':
        return { kind: 'directory', path };
      case 'file':
      case 'contiguous-file': {
        this.count(path, h.size ?? 0);
        return { kind: 'file', path, mode: ((h.mode ?? 0o644) & 0o111) !== 0 ? 0o755 : 0o644 };
      }
      case 'symlink': {
        const target = h.linkname ?? '';
        if (target === '' || target.includes('\0')) throw new ArchiveRefused(`${path}: a symlink without a target`);
        if (target.startsWith('/')) throw new ArchiveRefused(`${path}: the symlink points to the absolute path ${target} (links must stay inside the archive)`);
        const resolved = posix.normalize(posix.join(posix.dirname(path), target));
        if (resolved === '..' || resolved.startsWith('../')) throw new ArchiveRefused(`${path}: the symlink ${target} points out of the archive`);
        this.symlinks.add(path);
        return { kind: 'symlink', path, target };
      }
      case 'link': {
        const target = cleanName(h.linkname ?? '');
        if (!this.regularFiles.has(target)) throw new ArchiveRefused(`${path}: a hard link to ${h.linkname ?? ''}, which is not a file earlier in the archive`);
        this.count(path, 0);
        return { kind: 'hardlink', path, target };
      }
      default:
        throw new ArchiveRefused(`${path} is a ${type}: archives may hold only files, directories and links`);
    }
  }

  summary(): ArchiveSummary {
    return { files: this.files, unpackedBytes: this.bytes, hasDockerfile: this.regularFiles.has('Dockerfile') };
  }

  private count(path: string, size: number): void {
    this.regularFiles.add(path);
    this.files++;
    this.bytes += size;
    if (this.bytes > this.limits.maxUnpackedBytes) throw new TooLargeError(`the archive unpacks to more than ${Math.round(this.limits.maxUnpackedBytes / 1024 ** 2)} MB`);
  }
}

/** An entry's name as a clean relative path ('' for the root), or refused. */
function cleanName(raw: string): string {
  if (raw.includes('\0')) throw new ArchiveRefused('an entry name contains a NUL byte');
  if (Buffer.byteLength(raw) > NAME_MAX_BYTES) throw new ArchiveRefused(`an entry name is longer than ${NAME_MAX_BYTES} bytes`);
  if (raw.startsWith('/')) throw new ArchiveRefused(`${raw}: absolute paths are not allowed in the archive`);
  const parts = raw.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new ArchiveRefused(`${raw}: ".." is not allowed in entry names`);
  return parts.join('/');
}

/**
 * Writes one admitted entry below `root`. Every parent below the root was made by this pass as a
 * directory (symlinks are never parents: EntryRules), and files are created exclusively without
 * following a link, so nothing lands outside `root`.
 */
async function write(root: string, rule: Exclude<Admitted, { kind: 'skip' }>, entry: AsyncIterable<Buffer>): Promise<void> {
  const path = join(root, rule.path);
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  switch (rule.kind) {
    case 'directory':
      await mkdir(path, { recursive: true, mode: 0o755 });
      break;
    case 'symlink':
      await symlink(rule.target, path);
      break;
    case 'hardlink':
      await link(join(root, rule.target), path);
      break;
    case 'file': {
      const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
      const file = await open(path, flags, rule.mode);
      try {
        for await (const chunk of entry) await file.write(chunk);
      } finally {
        await file.close();
      }
      return;
    }
  }
  await drain(entry);
}
