// Tar archives for tests of uploaded sources, made with tar-stream: any entry, hostile ones included.
import { pack, type Header } from 'tar-stream';

export type ArchiveEntry = Partial<Header> & { name: string; body?: string | Buffer };

export async function tarOf(entries: ArchiveEntry[]): Promise<Buffer> {
  const p = pack();
  for (const { body, ...header } of entries) p.entry(header, body ?? '');
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const c of p as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

/**
 * Changes the header block at `offset` in place (a type or a size tar-stream's pack would not
 * write) and puts its checksum right, so that the reader judges the change, not a broken block.
 */
export function rewriteHeader(tar: Buffer, offset: number, change: (header: Buffer) => void): Buffer {
  const header = tar.subarray(offset, offset + 512);
  change(header);
  header.fill(' ', 148, 156);
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1');
  return tar;
}

/** A pax global header ('g') with `records` as its body, as the archive's first entry. */
export async function withGlobalHeader(records: string, rest: ArchiveEntry[]): Promise<Buffer> {
  const tar = await tarOf([{ name: 'pax_global_header', body: records }, ...rest]);
  return rewriteHeader(tar, 0, (h) => h.write('g', 156, 'latin1'));
}
