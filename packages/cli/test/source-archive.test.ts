// The archive `svc deploy` sends: what a directory packs to (read back as svcd reads it: gunzip,
// then tar), gzip members of a batch each, the cap on the compressed size, and the refusals that
// come before anything is sent. The deploys themselves are in cli.test.ts (against a real svcd).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { describe, test } from 'node:test';
import { extract } from 'tar-stream';
import { PackError, packDirectory } from '../src/source-archive.js';
import { tempDir } from './temp-dirs.js';

const MB = 1024 * 1024;
function directory(files: Record<string, string | Buffer>): string {
  const dir = tempDir('svc-pack-');
  for (const [name, body] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), body);
  }
  return dir;
}

/** The entries of a gzipped tar as a stream reader takes them (Node's gunzip, as svcd's archive reader): name to body. */
async function entries(archive: Buffer): Promise<Map<string, { type: string; body: Buffer; linkname?: string }>> {
  const found = new Map<string, { type: string; body: Buffer; linkname?: string }>();
  const reader = extract();
  reader.on('entry', (header, stream, next) => {
    const parts: Buffer[] = [];
    stream.on('data', (c: unknown) => parts.push(c as Buffer));
    stream.on('end', () => {
      found.set(header.name, { type: header.type, body: Buffer.concat(parts), ...(header.linkname ? { linkname: header.linkname } : {}) });
      next();
    });
  });
  const done = new Promise<void>((resolve, reject) => {
    reader.on('finish', resolve);
    reader.on('error', reject);
  });
  Readable.from([archive]).pipe(createGunzip()).pipe(reader);
  await done;
  return found;
}

/** How many gzip members an archive holds: each starts with the magic bytes, method deflate (1f 8b 08). */
function members(archive: Buffer): number {
  let n = 0;
  for (let i = archive.indexOf(Buffer.from([0x1f, 0x8b, 0x08])); i !== -1; i = archive.indexOf(Buffer.from([0x1f, 0x8b, 0x08]), i + 1)) n++;
  return n;
}

describe('svc deploy: the archive of a directory', () => {
  test('every file, directory and inner symlink, read back whole through one gunzip stream; a tar over a megabyte goes in several gzip members', async () => {
    // Compressible, larger than a member's batch: three members at least.
    const large = Buffer.from('0123456789abcdef\n'.repeat((2.5 * MB) / 17));
    // And 300 small files, 1.5 MB together: a member of pieces of many of them.
    const small = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`many/f${String(i).padStart(3, '0')}`, `${i} `.repeat(2500)]));
    const dir = directory({ Dockerfile: 'FROM scratch\n', 'public/index.html': '<h1>hi</h1>\n', 'public/large.txt': large, '.dockerignore': 'secret.txt\n', 'secret.txt': 'left out\n', ...small });
    symlinkSync('index.html', join(dir, 'public/home.html'));
    const packed = await packDirectory(dir, 64 * MB, 500 * MB);
    assert.equal(packed.ignoreFile, '.dockerignore');
    assert.equal(packed.files, 304, 'Dockerfile, .dockerignore, index.html, large.txt and the 300');
    assert.ok(members(packed.archive) >= 3, `gzip members: ${members(packed.archive)}`);
    assert.ok(packed.archive.length < large.length / 10, 'compressed');
    const read = await entries(packed.archive);
    assert.deepEqual([...read.keys()].filter((k) => !k.startsWith('many/f')).sort(), ['.dockerignore', 'Dockerfile', 'many/', 'public/', 'public/home.html', 'public/index.html', 'public/large.txt']);
    for (const [name, body] of Object.entries(small)) assert.equal(read.get(name)?.body.toString(), body, name);
    assert.ok(read.get('public/large.txt')?.body.equals(large), 'the large file whole, across the members');
    assert.equal(read.get('public/index.html')?.body.toString(), '<h1>hi</h1>\n');
    assert.equal(read.get('public/home.html')?.linkname, 'index.html');
  });

  test('more than the cap compressed is refused (checked a member at a time); a link out of it and a file over the unpacked cap are refused by name', async () => {
    // Random bytes do not compress: 3 MB of them are past a 1 MB cap after the first members.
    const dir = directory({ Dockerfile: 'FROM scratch\n', 'a.bin': randomBytes(3 * MB) });
    await assert.rejects(packDirectory(dir, 1 * MB, 500 * MB), (err: unknown) => err instanceof PackError && /packs to more than 1 MB/.test(err.message));
    // Under the cap, the same directory packs.
    assert.ok((await packDirectory(dir, 4 * MB, 500 * MB)).archive.length > 3 * MB);

    const linked = directory({ Dockerfile: 'FROM scratch\n' });
    symlinkSync('/etc/passwd', join(linked, 'passwd'));
    await assert.rejects(packDirectory(linked, 64 * MB, 500 * MB), (err: unknown) => err instanceof PackError && /passwd is a symlink to \/etc\/passwd, outside the directory/.test(err.message));

    const big = directory({ Dockerfile: 'FROM scratch\n', 'big.txt': Buffer.alloc(2 * MB) });
    await assert.rejects(packDirectory(big, 64 * MB, 1 * MB), (err: unknown) => err instanceof PackError && /big\.txt is larger than 1 MB/.test(err.message));
  });
});
