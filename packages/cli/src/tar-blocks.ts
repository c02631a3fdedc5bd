// The tar format as `svc deploy` writes it (source-archive.ts): POSIX ustar headers, with a pax
// extended header before an entry whose path or link target does not fit them (or is not ASCII).
//
// Written here, synchronously, instead of with tar-stream's pack (still the reader in the tests,
// as in svcd): that pack is a stream (streamx), and loading its machinery and passing each entry
// through its callbacks were 4-5 ms of every `svc deploy`'s start, before anything could be sent
// (2026-12-03, bench/build); its header encoder, the part needed here, is not exported. svc sends
// three kinds of entry, with no owner, device or sparse file: a handful of fields.

/** A tar block: headers take one, content is padded to whole ones. */
export const TAR_BLOCK = 512;

export interface TarEntry {
  /** Relative, with `/`; a directory's ends with `/`. */
  name: string;
  type: 'file' | 'directory' | 'symlink';
  mode: number;
  mtime: Date;
  /** A file's bytes (0 for the others). */
  size: number;
  /** A symlink's target. */
  linkname?: string;
}

const TYPE_FLAGS = { file: '0', symlink: '2', directory: '5' } as const;
/** The largest size an 11-digit octal field holds (8 GiB less a byte): svc's caps are far below it. */
const MAX_OCTAL_SIZE = 8 ** 11 - 1;

/** The blocks before an entry's content: a pax header with what does not fit the ustar fields, then the entry's own. */
export function entryHeader(entry: TarEntry): Buffer[] {
  if (entry.size > MAX_OCTAL_SIZE) throw new RangeError(`${entry.name}: ${entry.size} bytes do not fit a tar header`);
  const path = ustarPath(entry.name);
  const linkFits = entry.linkname === undefined || fitsField(entry.linkname, 100);
  const blocks: Buffer[] = [];
  if (path === null || !linkFits) {
    let records = '';
    if (path === null) records += paxRecord('path', entry.name);
    if (!linkFits && entry.linkname !== undefined) records += paxRecord('linkpath', entry.linkname);
    const data = Buffer.from(records, 'utf8');
    blocks.push(header({ name: 'PaxHeader', prefix: '', typeflag: 'x', mode: 0o644, size: data.length, mtime: entry.mtime, linkname: '' }), data, contentPadding(data.length));
  }
  blocks.push(
    header({
      // Cut to the fields when the pax header above holds the whole (readers take that one).
      name: path?.name ?? entry.name,
      prefix: path?.prefix ?? '',
      typeflag: TYPE_FLAGS[entry.type],
      mode: entry.mode,
      size: entry.type === 'file' ? entry.size : 0,
      mtime: entry.mtime,
      linkname: entry.linkname ?? '',
    }),
  );
  return blocks;
}

/** Zeros after `size` bytes of content, to the end of its last block. */
export function contentPadding(size: number): Buffer {
  return Buffer.alloc((TAR_BLOCK - (size % TAR_BLOCK)) % TAR_BLOCK);
}

/** The archive's end: two blocks of zeros. */
export function archiveEnd(): Buffer {
  return Buffer.alloc(2 * TAR_BLOCK);
}

/** Whether text is ASCII without NUL and at most `bytes` long (what a ustar field holds as is). */
function fitsField(text: string, bytes: number): boolean {
  return text.length <= bytes && !/[^\x01-\x7f]/.test(text);
}

/** The path as ustar's name (100 bytes) and prefix (155), split at a slash; null when it does not fit them. */
function ustarPath(path: string): { name: string; prefix: string } | null {
  if (!fitsField(path, 100 + 1 + 155)) return null;
  if (path.length <= 100) return { name: path, prefix: '' };
  // The shortest prefix that leaves a name of at most 100 (a directory's trailing slash included).
  for (let slash = path.indexOf('/'); slash !== -1 && slash <= 155; slash = path.indexOf('/', slash + 1)) {
    const name = path.slice(slash + 1);
    if (name.length <= 100 && name !== '' && name !== '/') return { name, prefix: path.slice(0, slash) };
  }
  return null;
}

/** One pax record: its length in bytes (counting its own digits), the key, the value. */
function paxRecord(key: string, value: string): string {
  const rest = ` ${key}=${value}\n`;
  const bytes = Buffer.byteLength(rest, 'utf8');
  let length = bytes + String(bytes).length;
  // One more digit when counting the digits carried the length over a power of ten.
  if (String(length).length !== String(bytes).length) length = bytes + String(length).length;
  return `${length}${rest}`;
}

interface HeaderFields {
  name: string;
  prefix: string;
  typeflag: string;
  mode: number;
  size: number;
  mtime: Date;
  linkname: string;
}

/** A ustar header block (POSIX.1-1988 layout, owner root, no device). */
function header(f: HeaderFields): Buffer {
  const block = Buffer.alloc(TAR_BLOCK);
  const text = (value: string, at: number, width: number) => block.write(value, at, width, 'utf8');
  const octal = (value: number, at: number, width: number) => text(`${Math.max(0, Math.floor(value)).toString(8).padStart(width - 1, '0')}\0`, at, width);
  text(f.name, 0, 100);
  octal(f.mode & 0o7777, 100, 8);
  octal(0, 108, 8); // uid
  octal(0, 116, 8); // gid
  octal(f.size, 124, 12);
  octal(f.mtime.getTime() / 1000, 136, 12);
  text(f.typeflag, 156, 1);
  text(f.linkname, 157, 100);
  text('ustar\0', 257, 6);
  text('00', 263, 2);
  octal(0, 329, 8); // devmajor
  octal(0, 337, 8); // devminor
  text(f.prefix, 345, 155);
  // The checksum: the sum of the header's bytes with its own field read as eight spaces.
  block.fill(' ', 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  text(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
  return block;
}
