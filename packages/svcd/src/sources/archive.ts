// Source archives a tenant uploads to build from (issue 25): a tar, gzipped or not, read as a
// stream and judged entry by entry. The same reader checks an upload as it arrives (nothing is
// written; a bad archive is refused with the reason) and unpacks it into a build's scratch area
// when the build runs, checking again: only that second pass writes, and only what it has judged.
//
// The rules, for an archive svc treats as hostile until read:
// - names are relative and stay inside: no leading `/`, no `..` part, no NUL, at most 1024 bytes,
//   255 a part and 64 parts deep;
// - only regular files, directories, symlinks and hard links; devices and FIFOs are refused;
// - a symlink resolves inside the archive, as the kernel would resolve it through the archive's
//   other symlinks (checked once all are known), and nothing is written through one (an entry
//   below a symlink is refused: the classic `d -> /etc`, `d/passwd`);
// - a hard link names a regular file that came earlier in the archive, and counts its size (the
//   build context sends each link as a full copy);
// - a name appears once (directories excepted); modes are reduced to 0644 or 0755;
// - the unpacked size and the number of entries are capped, and so is what the decompressor may
//   produce (a gzip bomb stops at the cap, not at the disk's end);
// - the format's own metadata headers (pax, GNU long names) are few and small (TarHeaderGuard):
//   tar-stream bounds each to 4 MB but its work on them is unbounded (a large pax global header is
//   copied into every entry after it).
// tar-stream (already svcd's, for build contexts) parses the format; these rules are svc's.
import { chmodSync, closeSync, constants as fsConstants, fchmodSync, linkSync, mkdirSync, openSync, symlinkSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { pipeline, Readable, Transform, type TransformCallback } from 'node:stream';
import { setImmediate as nextLoopTurn } from 'node:timers/promises';
import { createGunzip, gunzipSync } from 'node:zlib';
import { extract, type Extract, type Header } from 'tar-stream';
import { TooLargeError, ValidationError } from '../errors.js';
import { ByteCap } from '../streams/byte-cap.js';

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

const NAME_MAX_BYTES = 1024;
/** A part of a name (the file systems' own limit). */
const NAME_PART_MAX_BYTES = 255;
const NAME_MAX_DEPTH = 64;
/** As the kernel: a path that takes more symlinks than this does not resolve. */
const SYMLINK_HOPS_MAX = 40;
const TAR_BLOCK = 512;
/** pax headers ('x': long names, times, attributes) and GNU long names ('L', 'K') hold a few names. */
const METADATA_HEADER_MAX_BYTES = 8 * 1024;
/** A pax global header ('g': `git archive` writes one with the commit id) is small, and there is one. */
const GLOBAL_HEADER_MAX_BYTES = 1024;
/** Tar headers and padding on top of the files' own bytes: what the decompressor may produce beyond them. */
const TAR_OVERHEAD_PER_ENTRY = 1536;
const GZIP_MAGIC = [0x1f, 0x8b];
/**
 * Files up to this size are written whole with synchronous calls, as directories and links are:
 * an upload is mostly small files, and each asynchronous call waited for libuv's thread pool and
 * then for a turn of an event loop busy with the build's own requests (the unpacking of a
 * three-file upload took 4-7 ms of its way to the engine, bench/build). A larger file streams
 * through asynchronous writes, never held whole.
 */
const SYNC_FILE_MAX_BYTES = 64 * 1024;
/**
 * Synchronous calls made in a row before the event loop gets a turn, counting an entry, each
 * directory made for it (a name 64 deep under a new top directory makes 64) and each 16 KB
 * written: a tar of many small files or deep names holds svcd's requests a few ms at most.
 */
const SYNC_CALLS_PER_LOOP_TURN = 128;
const SYNC_BYTES_PER_CALL = 16 * 1024;
/**
 * A gzip archive this small whole, which unpacks to at most SMALL_GZIP_OUTPUT_MAX_BYTES, is
 * decompressed in one synchronous call (a fraction of a millisecond): streamed, each chunk went
 * to libuv's thread pool and back and the stream's end took one more trip (3 ms of a three-file
 * upload's unpacking, bench/build). Anything larger, or not valid gzip, is streamed as before
 * (and refused there with the stream's reason).
 */
const SMALL_GZIP_MAX_BYTES = 256 * 1024;
const SMALL_GZIP_OUTPUT_MAX_BYTES = 2 * 1024 * 1024;

/** Why an archive is refused: the tenant's mistake (or attack), told as a 400. */
export class ArchiveRefused extends ValidationError {}

/**
 * Reads the archive `input` to its end and checks every entry; with `into`, writes the entries
 * below that directory (which must exist and be empty). Rejects with ArchiveRefused (400) or
 * TooLargeError (413) on the first entry that breaks a rule, or with the signal's reason.
 */
export async function readArchive(input: AsyncIterable<Buffer>, limits: ArchiveLimits, into?: string, signal?: AbortSignal): Promise<ArchiveSummary> {
  signal?.throwIfAborted();
  const abortReason = () => (signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
  const source = await sniffed(input, signal, abortReason);
  // An abort between the first bytes and the listener below is not missed.
  if (signal?.aborted) {
    source.stream.destroy();
    throw abortReason();
  }
  const abort = () => source.stream.destroy(abortReason());
  signal?.addEventListener('abort', abort, { once: true });
  const tar = extract();
  const cap = limits.maxUnpackedBytes + limits.maxEntries * TAR_OVERHEAD_PER_ENTRY;
  // The callback pipeline answers its last stream: a failure anywhere ends that stream's iteration with it.
  const noop = () => {};
  const guard = new TarHeaderGuard(limits.maxEntries);
  const byteCap = new ByteCap(cap, () => new TooLargeError(`the archive unpacks to more than ${Math.round(cap / 1024 ** 2)} MB`));
  const decompressed = source.gzip ? pipeline(source.stream, createGunzip(), byteCap, guard, noop) : pipeline(source.stream, byteCap, guard, noop);
  const feeding = feed(decompressed, tar);
  // The feed's failure (a gzip error, the cap) ends the extract's iteration too; it is the one reported.
  feeding.catch(() => {});
  const judge = new EntryRules(limits);
  /** Directories this pass made (and set to 0755), relative to `into`. */
  const made = new Set<string>(['.']);
  let syncCalls = 0;
  try {
    for await (const entry of tar) {
      const rule = judge.admit(entry.header);
      if (into === undefined || rule.kind === 'skip') await drain(entry);
      else {
        syncCalls += await write(into, made, rule, entry as AsyncIterable<Buffer>);
        if (syncCalls >= SYNC_CALLS_PER_LOOP_TURN) {
          syncCalls = 0;
          await nextLoopTurn();
        }
      }
    }
    await feeding;
    judge.checkSymlinks();
  } catch (err) {
    // Everything stops here, whoever failed: the extractor (so that the feed waiting on it ends)
    // and the source (so that the input is no longer read).
    tar.destroy(err instanceof Error ? err : new Error(String(err)));
    decompressed.destroy();
    // After an abort, whatever failed failed because of it (a file being written when its entry's
    // stream was destroyed reads as an unpacking error, ERR_STREAM_DESTROYED): the abort is the cause.
    if (signal?.aborted) throw abortReason();
    if (err instanceof ArchiveRefused || err instanceof TooLargeError) throw err;
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
 * Ends when the extractor does, whatever ended it.
 */
async function feed(from: AsyncIterable<Buffer>, tar: Extract): Promise<void> {
  try {
    for await (const chunk of from) {
      if (tar.destroyed) throw new Error('the archive reader stopped');
      if (!tar.write(chunk)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            tar.off('drain', done);
            tar.off('close', done);
            resolve();
          };
          tar.on('drain', done);
          tar.on('close', done);
        });
      }
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

/**
 * The input with its first bytes looked at: gzip is unpacked, anything else is read as tar.
 * `gzip` says whether `stream` is still compressed (a small archive comes decompressed already).
 * An abort ends the wait for the input's first bytes, as it ends the stream's reading after.
 */
async function sniffed(input: AsyncIterable<Buffer>, signal: AbortSignal | undefined, abortReason: () => Error): Promise<{ stream: Readable; gzip: boolean }> {
  const it = input[Symbol.asyncIterator]();
  // Kept as they came and joined once: a client sending a byte at a time costs no copying.
  const read = { chunks: [] as Buffer[], bytes: 0, ended: false };
  /** Reads on until more than `bytes` are in, or the input ended. */
  const readPast = async (bytes: number) => {
    while (read.bytes <= bytes && !read.ended) {
      const next = await untilAborted(it.next(), signal, abortReason);
      if (next.done === true) read.ended = true;
      else {
        read.chunks.push(next.value);
        read.bytes += next.value.length;
      }
    }
  };
  let gzip: boolean;
  try {
    await readPast(GZIP_MAGIC.length - 1);
    if (read.bytes === 0) throw new ArchiveRefused('the archive is empty');
    // The first two bytes, wherever the chunks split them.
    const head = Buffer.concat(read.chunks.map((c) => c.subarray(0, GZIP_MAGIC.length)));
    gzip = GZIP_MAGIC.every((b, i) => head[i] === b);
    if (gzip) {
      await readPast(SMALL_GZIP_MAX_BYTES);
      const whole = read.ended ? smallGunzip(Buffer.concat(read.chunks, read.bytes)) : null;
      if (whole !== null) return { stream: Readable.from([whole]), gzip: false };
    }
  } catch (err) {
    // The input is not read on (an abort, a failed read): it is closed.
    if (it.return) it.return().catch(() => {});
    throw err;
  }
  const rest = async function* (): AsyncGenerator<Buffer> {
    yield* read.chunks;
    if (read.ended) return;
    for (;;) {
      const next = await it.next();
      if (next.done === true) return;
      yield next.value;
    }
  };
  return { stream: Readable.from(rest()), gzip };
}

/** `p`, or the abort's reason once the signal aborts first. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined, abortReason: () => Error): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(abortReason());
    if (signal.aborted) {
      abort();
      return;
    }
    signal.addEventListener('abort', abort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}

/** A small gzip archive decompressed, or null to stream it (too large unpacked, or not valid gzip). */
function smallGunzip(compressed: Buffer): Buffer | null {
  if (compressed.length > SMALL_GZIP_MAX_BYTES) return null;
  try {
    return gunzipSync(compressed, { maxOutputLength: SMALL_GZIP_OUTPUT_MAX_BYTES });
  } catch {
    return null;
  }
}

/**
 * Looks at the tar's header blocks on their way to tar-stream, passing every byte on unchanged,
 * and refuses what would make tar-stream's own work unbounded: a pax global header past 1 KB or
 * a second one, pax and GNU long-name headers past 8 KB, more such headers than the entry cap,
 * sizes in base-256 (past 8 GB), and pax records that set an entry's size (the ustar field holds
 * every size below the cap; with an override this guard would lose its place in the stream).
 * It follows the stream as tar-stream does (decodeOct, a null block, a directory's data) so that
 * both always look at the same blocks.
 */
class TarHeaderGuard extends Transform {
  private block = Buffer.alloc(0);
  /** Data bytes (padding included) to pass before the next header. */
  private skip = 0;
  /** A metadata header's body being collected, then its padding skipped. */
  private metadata: { type: string; size: number; body: Buffer[]; got: number } | null = null;
  private metadataHeaders = 0;
  private globals = 0;

  constructor(private readonly maxHeaders: number) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    try {
      this.look(chunk);
      done(null, chunk);
    } catch (err) {
      done(err as Error);
    }
  }

  private look(chunk: Buffer): void {
    for (let at = 0; at < chunk.length; ) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - at);
        this.skip -= n;
        at += n;
      } else if (this.metadata) {
        const m = this.metadata;
        const n = Math.min(m.size - m.got, chunk.length - at);
        m.body.push(chunk.subarray(at, at + n));
        m.got += n;
        at += n;
        if (m.got === m.size) {
          if (m.type === 'x' || m.type === 'g') checkPaxRecords(Buffer.concat(m.body));
          this.metadata = null;
          this.skip = padding(m.size);
        }
      } else {
        const n = Math.min(TAR_BLOCK - this.block.length, chunk.length - at);
        this.block = Buffer.concat([this.block, chunk.subarray(at, at + n)]);
        at += n;
        if (this.block.length === TAR_BLOCK) {
          const header = this.block;
          this.block = Buffer.alloc(0);
          this.header(header);
        }
      }
    }
  }

  private header(block: Buffer): void {
    let sum = 0;
    for (let i = 0; i < TAR_BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : (block[i] ?? 0);
    if (sum === 8 * 32) return; // an empty block: tar-stream skips it, and so does this
    const flag = block[156] ?? 0;
    const type = flag === 0 ? '0' : String.fromCharCode(flag);
    if (((block[124] ?? 0) & 0x80) !== 0) throw new TooLargeError('an entry of the archive is larger than 8 GB');
    const size = octal(block.subarray(124, 136));
    if (!Number.isSafeInteger(size) || size < 0) throw new ArchiveRefused('the body is not a tar archive (gzipped or not): a header has no valid size');
    if (type === 'x' || type === 'g' || type === 'L' || type === 'K' || type === 'N') {
      if (++this.metadataHeaders > this.maxHeaders) throw new ArchiveRefused(`the archive has more than ${this.maxHeaders} pax or long-name headers`);
      if (type === 'g' && (++this.globals > 1 || size > GLOBAL_HEADER_MAX_BYTES)) throw new ArchiveRefused(`the archive's pax global header is larger than ${GLOBAL_HEADER_MAX_BYTES} bytes, or there is more than one`);
      if (size > METADATA_HEADER_MAX_BYTES) throw new ArchiveRefused(`a pax or long-name header of the archive is larger than ${METADATA_HEADER_MAX_BYTES / 1024} KB`);
      if (size > 0) this.metadata = { type, size, body: [], got: 0 };
      return;
    }
    // tar-stream reads no data for a directory, whatever its size says.
    this.skip = type === '5' ? 0 : size + padding(size);
  }
}

/** A header's octal number as tar-stream's decodeOct reads it. */
function octal(field: Buffer): number {
  let start = 0;
  while (start < field.length && field[start] === 32) start++;
  let end = field.indexOf(32, start);
  if (end === -1) end = field.length;
  while (start < end && field[start] === 0) start++;
  return start === end ? 0 : parseInt(field.subarray(start, end).toString('latin1'), 8);
}

function padding(size: number): number {
  return (TAR_BLOCK - (size % TAR_BLOCK)) % TAR_BLOCK;
}

/** The keys of pax records, read as tar-stream's decodePax reads them: `size` is refused. */
function checkPaxRecords(body: Buffer): void {
  let rest = body;
  while (rest.length > 0) {
    let i = 0;
    while (i < rest.length && rest[i] !== 32) i++;
    const len = parseInt(rest.subarray(0, i).toString('latin1'), 10);
    if (!len) return;
    const record = rest.subarray(i + 1, len - 1).toString();
    const eq = record.indexOf('=');
    if (eq === -1) return;
    if (record.slice(0, eq) === 'size') throw new ArchiveRefused('the archive sets an entry\'s size in a pax header (only files under 8 GB are accepted, whose size the header itself holds)');
    rest = rest.subarray(len);
  }
}

type Admitted =
  | { kind: 'skip' }
  | { kind: 'directory'; path: string }
  | { kind: 'file'; path: string; mode: number; size: number }
  | { kind: 'symlink'; path: string; target: string }
  | { kind: 'hardlink'; path: string; target: string };

/** Steps all symlink resolutions of one archive may take together (a tangle of links is refused, not walked). */
const SYMLINK_STEPS_MAX = 200_000;

/** The rules of the header above, entry by entry, with what they need to remember. */
class EntryRules {
  /** Directories, named or implied by a deeper name. */
  private readonly directories = new Set<string>();
  /** Regular files (hard links too) and their sizes. */
  private readonly regularFiles = new Map<string, number>();
  /** Symlinks and their targets. */
  private readonly symlinks = new Map<string, string>();
  private entries = 0;
  private files = 0;
  private bytes = 0;

  constructor(private readonly limits: ArchiveLimits) {}

  /** The header as tar-stream gives it; its types say every field is there, but a null linkname or type is what a decoded header can have. */
  admit(h: Partial<Header> & Pick<Header, 'name'>): Admitted {
    if (++this.entries > this.limits.maxEntries) throw new ArchiveRefused(`the archive has more than ${this.limits.maxEntries} entries`);
    const path = cleanName(h.name);
    const type = h.type ?? null;
    if (type === null) throw new ArchiveRefused(`${path} has a type this tar reader does not know: archives may hold only files, directories and links`);
    if (path === '') {
      if (type === 'directory') return { kind: 'skip' }; // the root itself ("./")
      throw new ArchiveRefused(`an entry of type ${type} has no name`);
    }
    // Names once, first: a repeated name costs nothing more.
    if (this.directories.has(path)) {
      // A directory named twice (or named after a deeper name implied it) is harmless; anything else would replace it.
      if (type === 'directory') return { kind: 'skip' };
      throw new ArchiveRefused(`${path} appears twice in the archive (as a directory and as a ${type})`);
    }
    if (this.regularFiles.has(path) || this.symlinks.has(path)) throw new ArchiveRefused(`${path} appears twice in the archive`);
    this.parents(path);
    switch (type) {
      case 'directory':
        this.directories.add(path);
        return { kind: 'directory', path };
      case 'file':
      case 'contiguous-file':
        this.count(path, h.size ?? 0);
        return { kind: 'file', path, mode: ((h.mode ?? 0o644) & 0o111) !== 0 ? 0o755 : 0o644, size: h.size ?? 0 };
      case 'symlink': {
        const target = h.linkname ?? '';
        if (target === '' || target.includes('\0') || Buffer.byteLength(target) > NAME_MAX_BYTES) throw new ArchiveRefused(`${path}: a symlink without a target, or with one longer than ${NAME_MAX_BYTES} bytes`);
        if (target.startsWith('/')) throw new ArchiveRefused(`${path}: the symlink points to the absolute path ${target} (links must stay inside the archive)`);
        this.symlinks.set(path, target);
        return { kind: 'symlink', path, target };
      }
      case 'link': {
        const target = cleanName(h.linkname ?? '');
        const size = this.regularFiles.get(target);
        if (size === undefined) throw new ArchiveRefused(`${path}: a hard link to ${h.linkname ?? ''}, which is not a file earlier in the archive`);
        // The build context sends each link as a copy of its file: it counts as one.
        this.count(path, size);
        return { kind: 'hardlink', path, target };
      }
      default:
        throw new ArchiveRefused(`${path} is a ${type}: archives may hold only files, directories and links`);
    }
  }

  /**
   * Once every entry is known: each symlink resolves inside the archive, followed through the
   * archive's other symlinks as the kernel would (`d/l -> ..`, then `d/t -> l/..`, is out).
   */
  checkSymlinks(): void {
    let steps = 0;
    for (const [path, target] of this.symlinks) {
      const resolved = path.split('/').slice(0, -1);
      const pending = target.split('/').reverse();
      let hops = 0;
      for (let part = pending.pop(); part !== undefined; part = pending.pop()) {
        if (++steps > SYMLINK_STEPS_MAX) throw new ArchiveRefused('the archive\'s symlinks take too many steps to resolve');
        if (part === '' || part === '.') continue;
        if (part === '..') {
          if (resolved.length === 0) throw new ArchiveRefused(`${path}: the symlink ${target} points out of the archive`);
          resolved.pop();
          continue;
        }
        resolved.push(part);
        const next = this.symlinks.get(resolved.join('/'));
        if (next === undefined) continue;
        if (++hops > SYMLINK_HOPS_MAX) throw new ArchiveRefused(`${path}: the symlink ${target} goes through more than ${SYMLINK_HOPS_MAX} links`);
        resolved.pop();
        for (const p of next.split('/').reverse()) pending.push(p);
      }
    }
  }

  summary(): ArchiveSummary {
    return { files: this.files, unpackedBytes: this.bytes, hasDockerfile: this.regularFiles.has('Dockerfile') };
  }

  /**
   * Every parent of `path` is a directory, named or implied now; none is a symlink (nothing is
   * written through one) or a file. Walks up only to the nearest directory already known.
   */
  private parents(path: string): void {
    const implied: string[] = [];
    for (let parent = posix.dirname(path); parent !== '.' && !this.directories.has(parent); parent = posix.dirname(parent)) {
      if (this.symlinks.has(parent)) throw new ArchiveRefused(`${path}: an entry inside the symlink ${parent} (nothing is written through a link)`);
      if (this.regularFiles.has(parent)) throw new ArchiveRefused(`${path}: ${parent} is a file, not a directory`);
      implied.push(parent);
    }
    for (const d of implied) this.directories.add(d);
  }

  private count(path: string, size: number): void {
    this.regularFiles.set(path, size);
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
  if (parts.length > NAME_MAX_DEPTH) throw new ArchiveRefused(`${raw}: more than ${NAME_MAX_DEPTH} directories deep`);
  if (parts.some((p) => Buffer.byteLength(p) > NAME_PART_MAX_BYTES)) throw new ArchiveRefused(`${raw}: a part of the name is longer than ${NAME_PART_MAX_BYTES} bytes`);
  return parts.join('/');
}

/**
 * Makes the directory `rel` below `root` and any missing parent, each 0755 whatever svcd's
 * umask (an image's directories must be readable by any user it runs as), once per pass.
 */
function directory(root: string, made: Set<string>, rel: string): void {
  if (made.has(rel)) return;
  directory(root, made, posix.dirname(rel));
  const path = join(root, rel);
  try {
    mkdirSync(path);
  } catch (err) {
    // A directory the archive named twice, or the pass's own: anything else (a file there) is the archive's.
    if ((err as { code?: string }).code !== 'EEXIST') throw err;
  }
  chmodSync(path, 0o755);
  made.add(rel);
}

/**
 * Writes one admitted entry below `root`. Every parent below the root was made by this pass as a
 * directory (symlinks are never parents: EntryRules), and files are created exclusively without
 * following a link, so nothing lands outside `root`.
 */
async function write(root: string, made: Set<string>, rule: Exclude<Admitted, { kind: 'skip' }>, entry: AsyncIterable<Buffer>): Promise<number> {
  try {
    return await writeEntry(root, made, rule, entry);
  } catch (err) {
    // The tenant's archive, not svc, is what the file system refused (the scratch path stays out of the message).
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string') throw new ArchiveRefused(`${rule.path} could not be unpacked (${code})`);
    throw err;
  }
}

/** Writes the entry; answers the synchronous calls it made (SYNC_CALLS_PER_LOOP_TURN counts them). */
async function writeEntry(root: string, made: Set<string>, rule: Exclude<Admitted, { kind: 'skip' }>, entry: AsyncIterable<Buffer>): Promise<number> {
  const path = join(root, rule.path);
  const directoriesBefore = made.size;
  directory(root, made, posix.dirname(rule.path));
  const calls = () => 1 + made.size - directoriesBefore;
  switch (rule.kind) {
    case 'directory':
      directory(root, made, rule.path);
      break;
    case 'symlink':
      symlinkSync(rule.target, path);
      break;
    case 'hardlink':
      linkSync(join(root, rule.target), path);
      break;
    case 'file':
      return calls() + Math.floor((await writeFile(path, rule, entry)) / SYNC_BYTES_PER_CALL);
  }
  await drain(entry);
  return calls();
}

/**
 * A regular file, created exclusively without following a link, with the mode as judged
 * (whatever svcd's umask took from it at open: a 0600 file in the image would be unreadable to an
 * app that runs as another user, USER in the Dockerfile). Answers the bytes written synchronously.
 */
async function writeFile(path: string, rule: { mode: number; size: number }, entry: AsyncIterable<Buffer>): Promise<number> {
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
  if (rule.size <= SYNC_FILE_MAX_BYTES) {
    // Its bytes first (the extractor gives an entry exactly its header's size), then one write.
    const chunks: Buffer[] = [];
    for await (const chunk of entry) chunks.push(chunk);
    const fd = openSync(path, flags, rule.mode);
    try {
      fchmodSync(fd, rule.mode);
      writeFileSync(fd, Buffer.concat(chunks));
    } finally {
      closeSync(fd);
    }
    return rule.size;
  }
  const file = await open(path, flags, rule.mode);
  try {
    await file.chmod(rule.mode);
    for await (const chunk of entry) await file.write(chunk);
  } finally {
    await file.close();
  }
  return 0;
}
