// The archive `svc deploy` sends: what a directory packs to (read back as svcd reads it: gunzip,
// then tar), gzip members of a batch each, the cap on the compressed size, and the refusals that
// come before anything is sent. The deploys themselves are in cli.test.ts (against a real svcd).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip, gunzipSync } from 'node:zlib';
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
    const packed = packDirectory(dir, 64 * MB, 500 * MB);
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

  test('names and link targets past what ustar holds (pax), not ASCII, at the fields\' edges; sizes on and off a block: read back alike by tar-stream and GNU tar', async () => {
    const deep = `${'d'.repeat(60)}/${'e'.repeat(60)}/${'f'.repeat(60)}`;
    const files: Record<string, string | Buffer> = {
      Dockerfile: 'FROM scratch\n',
      ['a'.repeat(100)]: 'a name of exactly 100 bytes\n',
      ['b'.repeat(101)]: 'one byte more, no slash to split at: pax\n',
      [`${'d'.repeat(60)}/${'e'.repeat(60)}/${'g'.repeat(90)}.txt`]: 'a prefix and a name (ustar split)\n',
      [`${deep}/${'g'.repeat(90)}.txt`]: 'past 256 bytes: pax\n',
      [`${'h'.repeat(200)}/${'i'.repeat(120)}`]: 'neither fits: pax\n',
      'café/naïve-日本.txt': 'not ASCII: pax\n',
      'block.bin': Buffer.alloc(512, 7),
      'two-blocks-and-a-byte.bin': Buffer.alloc(1025, 9),
      'empty.txt': '',
      // A pax record of 998 bytes before its length: with its four digits, 1002 (the carry).
      [`${'j'.repeat(200)}/${'k'.repeat(200)}/${'l'.repeat(200)}/${'m'.repeat(200)}/${'n'.repeat(187)}`]: 'a path of 991 bytes\n',
    };
    const dir = directory(files);
    symlinkSync(`${'../'.repeat(2)}${'b'.repeat(101)}`, join(dir, deep, 'far-link'));
    symlinkSync('café/naïve-日本.txt', join(dir, 'link-to-unicode'));
    const packed = packDirectory(dir, 64 * MB, 500 * MB);
    assert.equal(packed.archive.length > 0, true);

    // tar-stream (svcd's reader): names, bodies and targets.
    const read = await entries(packed.archive);
    for (const [name, body] of Object.entries(files)) assert.equal(read.get(name)?.body.toString('latin1'), Buffer.from(body).toString('latin1'), name);
    assert.equal(read.get(`${deep}/far-link`)?.linkname, `../../${'b'.repeat(101)}`);
    assert.equal(read.get('link-to-unicode')?.linkname, 'café/naïve-日本.txt');
    assert.equal(read.get(`${deep}/`)?.type, 'directory');

    // A pax header only where ustar cannot hold the name or the target (a split path fits it).
    const tar = gunzipSync(packed.archive);
    const withPax: string[] = [];
    let paxPath: string | null = null;
    for (let at = 0; at + 512 <= tar.length; ) {
      const header = tar.subarray(at, at + 512);
      if (header.every((b) => b === 0)) break;
      const field = (from: number, width: number) => header.toString('utf8', from, from + width).replace(/\0.*$/s, '');
      const bytes = Number.parseInt(field(124, 12), 8);
      if (field(156, 1) === 'x') {
        paxPath = /^\d+ path=(.*)$/m.exec(tar.toString('utf8', at + 512, at + 512 + bytes))?.[1] ?? '';
      } else if (paxPath !== null) {
        const prefix = field(345, 155);
        withPax.push(paxPath || (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100)));
        paxPath = null;
      }
      at += 512 + Math.ceil(bytes / 512) * 512;
    }
    const longDirs = ['j', 'k', 'l', 'm'].map((_, i, all) => `${all.slice(0, i + 1).map((c) => c.repeat(200)).join('/')}/`);
    const expected = ['b'.repeat(101), `${'h'.repeat(200)}/`, `${'h'.repeat(200)}/${'i'.repeat(120)}`, 'café/', 'café/naïve-日本.txt', ...longDirs, `${longDirs[3] ?? ''}${'n'.repeat(187)}`, `${deep}/${'g'.repeat(90)}.txt`, `${deep}/far-link`, 'link-to-unicode'];
    assert.deepEqual(withPax.sort(), expected.sort());

    // GNU tar, another implementation: the same list, and a checksum it accepts on every header.
    const listed = spawnSync('tar', ['-tzvf', '-'], { input: packed.archive, encoding: 'utf8' });
    assert.equal(listed.status, 0, listed.stderr);
    assert.equal(listed.stderr, '', 'no warning (a bad checksum or an unknown header is one)');
    const names = new Set(listed.stdout.trim().split('\n').map((line) => line.split(/\s+/).slice(5).join(' ').replace(/ -> .*$/, '')));
    for (const name of [...Object.keys(files), `${deep}/`, `${deep}/far-link`, 'link-to-unicode']) assert.ok(names.has(name), `${name} in ${JSON.stringify([...names])}`);
    assert.match(listed.stdout, /^lrwxrwxrwx .* link-to-unicode -> café\/naïve-日本\.txt$/m);
    assert.match(listed.stdout, /^-rw-r--r-- .* 1025 .* two-blocks-and-a-byte\.bin$/m);
    const unpacked = tempDir('svc-pack-out-');
    const extracted = spawnSync('tar', ['-xzf', '-', '-C', unpacked], { input: packed.archive, encoding: 'utf8' });
    assert.equal(extracted.status, 0, extracted.stderr);
    for (const [name, body] of Object.entries(files)) assert.ok(readFileSync(join(unpacked, name)).equals(Buffer.from(body)), name);
  });

  test('more than the cap compressed is refused (checked a member at a time); a link out of it and a file over the unpacked cap are refused by name', () => {
    // Random bytes do not compress: 3 MB of them are past a 1 MB cap after the first members.
    const dir = directory({ Dockerfile: 'FROM scratch\n', 'a.bin': randomBytes(3 * MB) });
    assert.throws(() => packDirectory(dir, 1 * MB, 500 * MB), (err: unknown) => err instanceof PackError && /packs to more than 1 MB/.test(err.message));
    // Under the cap, the same directory packs.
    assert.ok(packDirectory(dir, 4 * MB, 500 * MB).archive.length > 3 * MB);

    const linked = directory({ Dockerfile: 'FROM scratch\n' });
    symlinkSync('/etc/passwd', join(linked, 'passwd'));
    assert.throws(() => packDirectory(linked, 64 * MB, 500 * MB), (err: unknown) => err instanceof PackError && /passwd is a symlink to \/etc\/passwd, outside the directory/.test(err.message));

    const big = directory({ Dockerfile: 'FROM scratch\n', 'big.txt': Buffer.alloc(2 * MB) });
    assert.throws(() => packDirectory(big, 64 * MB, 1 * MB), (err: unknown) => err instanceof PackError && /big\.txt is larger than 1 MB/.test(err.message));
  });
});
