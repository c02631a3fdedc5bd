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
