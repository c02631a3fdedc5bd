// The rules of uploaded source archives (sources/archive.ts), on real tar and gzip bytes and a
// real directory: every hostile archive is refused with its reason and writes nothing outside
// the directory it is unpacked into, and the same archives made harmless are accepted.
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { ArchiveRefused, readArchive, type ArchiveLimits } from '../src/sources/archive.js';
import { TooLargeError } from '../src/errors.js';
import { rewriteHeader, tarOf, withGlobalHeader, type ArchiveEntry } from './archive-fixtures.js';

type Entry = ArchiveEntry;

async function* chunked(buf: Buffer, size = 700): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
}

const LIMITS: ArchiveLimits = { maxUnpackedBytes: 1024 * 1024, maxEntries: 100 };
const DOCKERFILE: Entry = { name: 'Dockerfile', body: 'FROM scratch\n' };

let base = '';
before(async () => {
  base = await mkdtemp(join(tmpdir(), 'svc-archive-test-'));
});
after(async () => {
  await rm(base, { recursive: true, force: true });
});

/** A fresh, empty directory to unpack into, inside `base`, with a sibling that must stay empty. */
async function area(): Promise<{ into: string; outside: string }> {
  const root = await mkdtemp(join(base, 'case-'));
  const into = join(root, 'context');
  const outside = join(root, 'outside');
  await mkdir(into);
  await mkdir(outside);
  return { into, outside };
}

async function refused(entries: Entry[], pattern: RegExp): Promise<void> {
  const tar = await tarOf([DOCKERFILE, ...entries]);
  // The check alone (as an upload arrives) and the unpacking (as a build runs) refuse alike.
  await assert.rejects(readArchive(chunked(tar), LIMITS), (err: unknown) => err instanceof ArchiveRefused && pattern.test(err.message));
  const { into, outside } = await area();
  await assert.rejects(readArchive(chunked(tar), LIMITS, into), (err: unknown) => err instanceof ArchiveRefused && pattern.test(err.message));
  assert.deepEqual(await readdir(outside), [], 'nothing was written outside the context');
}

describe('source archives', () => {
  test('a plain and a gzipped tar unpack with files, directories, links and modes', async () => {
    const entries: Entry[] = [
      { name: './', type: 'directory' },
      DOCKERFILE,
      { name: 'src/', type: 'directory' },
      { name: 'src/app.sh', body: 'echo hi\n', mode: 0o4755 },
      { name: 'src/data.txt', body: 'data', mode: 0o666 },
      { name: 'src/current', type: 'symlink', linkname: 'app.sh' },
      { name: 'up', type: 'symlink', linkname: 'src/../src/data.txt' },
      { name: 'again.txt', type: 'link', linkname: 'src/data.txt' },
      { name: 'nested/deep/file', body: 'x' },
    ];
    for (const gzip of [false, true]) {
      const tar = await tarOf(entries);
      const { into, outside } = await area();
      const summary = await readArchive(chunked(gzip ? gzipSync(tar) : tar), LIMITS, into);
      // The hard link counts its file's 4 bytes again: the build context sends it as a copy.
      assert.deepEqual(summary, { files: 5, unpackedBytes: 13 + 8 + 4 + 4 + 1, hasDockerfile: true });
      assert.equal(await readFile(join(into, 'src/app.sh'), 'utf8'), 'echo hi\n');
      // setuid dropped, the executable bit kept; world-writable reduced to 0644.
      assert.equal((await stat(join(into, 'src/app.sh'))).mode & 0o7777, 0o755);
      assert.equal((await stat(join(into, 'src/data.txt'))).mode & 0o7777, 0o644);
      assert.equal(await readlink(join(into, 'src/current')), 'app.sh');
      assert.equal(await readFile(join(into, 'again.txt'), 'utf8'), 'data');
      assert.equal((await stat(join(into, 'again.txt'))).ino, (await stat(join(into, 'src/data.txt'))).ino);
      assert.equal(await readFile(join(into, 'nested/deep/file'), 'utf8'), 'x');
      assert.deepEqual(await readdir(outside), []);
    }
  });

  test('a gzip of several members (svc deploy compresses a megabyte at a time) unpacks whole, a member boundary on a chunk boundary too', async () => {
    const body = 'member '.repeat(40_000);
    const tar = await tarOf([DOCKERFILE, { name: 'big.txt', body }, { name: 'after.txt', body: 'after' }]);
    const cut = 100_000;
    const first = gzipSync(tar.subarray(0, cut));
    const members = Buffer.concat([first, gzipSync(tar.subarray(cut))]);
    for (const size of [700, first.length]) {
      const { into } = await area();
      const summary = await readArchive(chunked(members, size), LIMITS, into);
      assert.deepEqual(summary, { files: 3, unpackedBytes: 13 + body.length + 5, hasDockerfile: true });
      assert.equal(await readFile(join(into, 'big.txt'), 'utf8'), body);
      assert.equal(await readFile(join(into, 'after.txt'), 'utf8'), 'after');
    }
  });

  test('archives of every size unpack alike: small ones whole, large ones and large files streamed', async () => {
    // A small gzip archive is decompressed in one call, a file of up to 64 KB written whole; past
    // those (a gzip over 256 KB, one that unpacks past 2 MB, a file over 64 KB) both stream.
    const limits: ArchiveLimits = { maxUnpackedBytes: 16 * 1024 * 1024, maxEntries: 1000 };
    const noise = randomBytes(300 * 1024);
    const cases: Record<string, Entry[]> = {
      'a small gzip of many small files': [DOCKERFILE, ...Array.from({ length: 150 }, (_, i) => ({ name: `files/f${i}.txt`, body: `file ${i}\n` }))],
      'a file of 64 KB and one just past it': [DOCKERFILE, { name: 'at.bin', body: noise.subarray(0, 64 * 1024) }, { name: 'past.bin', body: noise.subarray(0, 64 * 1024 + 1), mode: 0o755 }],
      'a gzip of over 256 KB': [DOCKERFILE, { name: 'noise.bin', body: noise }],
      'a small gzip that unpacks past 2 MB': [DOCKERFILE, { name: 'zeros.bin', body: Buffer.alloc(3 * 1024 * 1024) }],
    };
    for (const [what, entries] of Object.entries(cases)) {
      const tar = await tarOf(entries);
      for (const gzip of [true, false]) {
        const body = gzip ? gzipSync(tar) : tar;
        if (what === 'a gzip of over 256 KB' && gzip) assert.ok(body.length > 256 * 1024, 'random bytes do not compress');
        if (what === 'a small gzip that unpacks past 2 MB' && gzip) assert.ok(body.length < 256 * 1024, 'zeros compress');
        const { into } = await area();
        const summary = await readArchive(chunked(body, 64 * 1024), limits, into);
        assert.equal(summary.files, entries.length, `${what} (gzip: ${gzip})`);
        for (const e of entries) {
          const expected = typeof e.body === 'string' ? Buffer.from(e.body) : (e.body ?? Buffer.alloc(0));
          assert.ok((await readFile(join(into, e.name))).equals(expected), `${e.name} of ${what} (gzip: ${gzip})`);
        }
        if (what === 'a file of 64 KB and one just past it') {
          assert.equal((await stat(join(into, 'at.bin'))).mode & 0o777, 0o644);
          assert.equal((await stat(join(into, 'past.bin'))).mode & 0o777, 0o755);
        }
      }
    }
  });

  test('a small gzip archive read ahead a byte at a time costs no copying of what came before', async () => {
    // 200 KB of gzip in single bytes: joined once, not again at every byte (20 GB of copying).
    const gz = gzipSync(await tarOf([DOCKERFILE, { name: 'noise.bin', body: randomBytes(200 * 1024) }]));
    assert.ok(gz.length < 256 * 1024);
    const began = performance.now();
    const summary = await readArchive(chunked(gz, 1), { ...LIMITS, maxUnpackedBytes: 1024 * 1024 });
    assert.equal(summary.files, 2);
    assert.ok(performance.now() - began < 5_000, `read in ${Math.round(performance.now() - began)} ms`);
  });

  test('the event loop gets turns while deep names and many small files are unpacked', async () => {
    // 200 names 30 deep, each under a new top directory: 6,000 directories made with synchronous
    // calls. The unpacking yields every 128 calls, not every so many entries.
    const entries: Entry[] = [DOCKERFILE, ...Array.from({ length: 200 }, (_, i) => ({ name: `t${i}/${Array.from({ length: 29 }, (__, d) => `d${d}`).join('/')}/f`, body: 'x' }))];
    const tar = await tarOf(entries);
    let turns = 0;
    let unpacking = true;
    const count = () => {
      turns++;
      if (unpacking) setImmediate(count);
    };
    setImmediate(count);
    const { into } = await area();
    await readArchive(chunked(tar, tar.length), { maxUnpackedBytes: 1024 * 1024, maxEntries: 1000 }, into);
    unpacking = false;
    assert.equal(await readFile(join(into, entries[200]!.name), 'utf8'), 'x');
    assert.ok(turns >= 30, `the event loop turned ${turns} times during 6,000 directories`);
  });

  test('the check alone writes nothing and tells whether a Dockerfile is at the root', async () => {
    assert.equal((await readArchive(chunked(await tarOf([{ name: 'sub/Dockerfile', body: 'FROM scratch' }])), LIMITS)).hasDockerfile, false);
    assert.equal((await readArchive(chunked(await tarOf([{ name: 'Dockerfile', type: 'symlink', linkname: 'x' }])), LIMITS)).hasDockerfile, false);
    assert.equal((await readArchive(chunked(await tarOf([DOCKERFILE])), LIMITS)).hasDockerfile, true);
  });

  test('absolute names and .. are refused', async () => {
    await refused([{ name: '/etc/passwd', body: 'x' }], /absolute paths/);
    await refused([{ name: '../outside/x', body: 'x' }], /"\.\." is not allowed/);
    await refused([{ name: 'a/../../outside/x', body: 'x' }], /"\.\." is not allowed/);
  });

  test('symlinks out of the archive, and writes through a symlink, are refused', async () => {
    await refused([{ name: 'l', type: 'symlink', linkname: '/etc' }], /absolute path \/etc/);
    await refused([{ name: 'a/l', type: 'symlink', linkname: '../../outside' }], /points out of the archive/);
    // Even a link that points inside cannot be written through (its target could be swapped).
    await refused([{ name: 'd', type: 'directory' }, { name: 'l', type: 'symlink', linkname: 'd' }, { name: 'l/x', body: 'x' }], /inside the symlink l/);
  });

  test('hard links only to files earlier in the archive', async () => {
    await refused([{ name: 'h', type: 'link', linkname: '/etc/passwd' }], /absolute paths/);
    await refused([{ name: 'h', type: 'link', linkname: '../outside/x' }], /"\.\." is not allowed/);
    await refused([{ name: 'h', type: 'link', linkname: 'later' }, { name: 'later', body: 'x' }], /not a file earlier in the archive/);
    await refused([{ name: 'd', type: 'directory' }, { name: 'h', type: 'link', linkname: 'd' }], /not a file earlier in the archive/);
  });

  test('devices, FIFOs and names given twice are refused', async () => {
    await refused([{ name: 'null', type: 'character-device', devmajor: 1, devminor: 3 }], /is a character-device/);
    await refused([{ name: 'sda', type: 'block-device', devmajor: 8, devminor: 0 }], /is a block-device/);
    await refused([{ name: 'p', type: 'fifo' }], /is a fifo/);
    await refused([{ name: 'x', body: 'a' }, { name: 'x', body: 'b' }], /appears twice/);
    await refused([{ name: 'f', body: 'a' }, { name: 'f/x', body: 'b' }], /f is a file, not a directory/);
  });

  test('a tar bomb stops at the cap: unpacked size, gzip output and entries', async () => {
    const big = await tarOf([DOCKERFILE, { name: 'zeros', body: Buffer.alloc(LIMITS.maxUnpackedBytes + 1) }]);
    const gz = gzipSync(big);
    assert.ok(gz.length < 10_000, 'the bomb is small');
    const { into, outside } = await area();
    await assert.rejects(readArchive(chunked(gz), LIMITS, into), (err: unknown) => err instanceof TooLargeError && /unpacks to more than 1 MB/.test(err.message));
    assert.deepEqual(await readdir(outside), []);
    // Zeros after the end of the archive are decompressed too, and capped as well.
    const padded = gzipSync(Buffer.concat([await tarOf([DOCKERFILE]), Buffer.alloc(LIMITS.maxUnpackedBytes + LIMITS.maxEntries * 1536 + 1024)]));
    await assert.rejects(readArchive(chunked(padded), LIMITS), TooLargeError);
    const many = await tarOf(Array.from({ length: LIMITS.maxEntries + 1 }, (_, i) => ({ name: `f${i}`, body: '' })));
    await assert.rejects(readArchive(chunked(many), LIMITS), /more than 100 entries/);
  });

  test('a body that is not a tar, or broken gzip, or empty, is refused with a clear reason', async () => {
    await assert.rejects(readArchive(chunked(Buffer.from('hello, this is not a tar archive at all\n'.repeat(20))), LIMITS), (err: unknown) => err instanceof ArchiveRefused && /not a tar archive/.test(err.message));
    const gz = gzipSync(await tarOf([DOCKERFILE]));
    await assert.rejects(readArchive(chunked(gz.subarray(0, 30)), LIMITS), (err: unknown) => err instanceof ArchiveRefused);
    await assert.rejects(readArchive(chunked(Buffer.concat([gz.subarray(0, 12), Buffer.alloc(200, 7)])), LIMITS), (err: unknown) => err instanceof ArchiveRefused && /not valid gzip/.test(err.message));
    await assert.rejects(readArchive(chunked(Buffer.alloc(0)), LIMITS), /empty/);
    // The refusal leaves no half-written file behind the context it was unpacking into, either.
    const { into } = await area();
    await assert.rejects(readArchive(chunked(Buffer.from('not a tar'.repeat(100))), LIMITS, into));
    assert.ok((await lstat(into)).isDirectory());
  });

  test('symlinks are resolved through each other, as the kernel would', async () => {
    // Each link alone looks inside; together d/t is the context's parent.
    await refused([{ name: 'd/l', type: 'symlink', linkname: '..' }, { name: 'd/t', type: 'symlink', linkname: 'l/..' }], /d\/t: the symlink l\/\.\. points out of the archive/);
    await refused([{ name: 'a', type: 'symlink', linkname: 'b' }, { name: 'b', type: 'symlink', linkname: 'a' }], /more than 40 links/);
    // Inside through each other: accepted (node_modules/.bin style).
    const ok = await tarOf([DOCKERFILE, { name: 'pkg/bin/tool', body: 'x' }, { name: 'bin/tool', type: 'symlink', linkname: '../pkg/bin/tool' }, { name: 'alias', type: 'symlink', linkname: 'bin/tool' }]);
    assert.equal((await readArchive(chunked(ok), LIMITS)).files, 2);
  });

  test('hard links count as the copies the build context makes of them', async () => {
    const half = Buffer.alloc(LIMITS.maxUnpackedBytes / 2 + 1);
    await assert.rejects(readArchive(chunked(gzipSync(await tarOf([DOCKERFILE, { name: 'big', body: half }, { name: 'copy', type: 'link', linkname: 'big' }]))), LIMITS), TooLargeError);
  });

  test('names: at most 64 parts deep and 255 bytes a part', async () => {
    await refused([{ name: `${'d/'.repeat(65)}f`, body: 'x' }], /more than 64 directories deep/);
    await refused([{ name: 'n'.repeat(256), body: 'x' }], /longer than 255 bytes/);
    const deepest = `${'d/'.repeat(63)}f`;
    assert.equal((await readArchive(chunked(await tarOf([DOCKERFILE, { name: deepest, body: 'x' }])), LIMITS)).files, 2);
  });

  test('the format\'s metadata headers are few and small: a large pax global header, a large pax header, a pax size', async () => {
    // git archive writes one small global header (the commit id): accepted.
    assert.equal((await readArchive(chunked(await withGlobalHeader('52 comment=0123456789abcdef0123456789abcdef01234567\n', [DOCKERFILE])), LIMITS)).hasDockerfile, true);
    const many = Array.from({ length: 600 }, (_, i) => `k${i}=v`).map((kv) => `${kv.length + 4} ${kv}\n`).join('');
    const refusedBytes = async (tar: Buffer, pattern: RegExp) => assert.rejects(readArchive(chunked(tar), LIMITS), (err: unknown) => err instanceof ArchiveRefused && pattern.test(err.message));
    await refusedBytes(await withGlobalHeader(many, [DOCKERFILE]), /pax global header is larger than 1024 bytes/);
    const twice = await withGlobalHeader('12 a=bcdefg\n', [{ name: 'second', body: '12 a=bcdefg\n' }, DOCKERFILE]);
    await refusedBytes(rewriteHeader(twice, 1024, (h) => h.write('g', 156, 'latin1')), /or there is more than one/);
    await refused([{ name: 'x', body: 'x', pax: { comment: 'c'.repeat(9000) } }], /larger than 8 KB/);
    await refused([{ name: 'x', body: 'x', pax: { size: '1' } }], /sets an entry's size in a pax header/);
    // Long names through pax (what tar-stream's pack, and svc deploy, write past 100 bytes): accepted.
    const long = `${'long-directory-name/'.repeat(8)}file`;
    const { into } = await area();
    await readArchive(chunked(await tarOf([DOCKERFILE, { name: long, body: 'deep' }])), LIMITS, into);
    assert.equal(await readFile(join(into, long), 'utf8'), 'deep');
  });

  test('an unpacking the file system refuses midway ends with the reason, and does not hang', async () => {
    const { into } = await area();
    await mkdir(join(into, 'taken'));
    const tar = await tarOf([DOCKERFILE, { name: 'taken', body: 'x' }, { name: 'after', body: Buffer.alloc(4 * 1024 * 1024) }]);
    await assert.rejects(readArchive(chunked(tar, 64 * 1024), { ...LIMITS, maxUnpackedBytes: 8 * 1024 * 1024 }, into), /taken appears twice|taken could not be unpacked \(EEXIST\)/);
    // The same with the file first in a fresh directory but already there on disk.
    const second = await area();
    await mkdir(join(second.into, 'pre'));
    const tar2 = await tarOf([DOCKERFILE, { name: 'pre', body: 'x' }, { name: 'after', body: Buffer.alloc(4 * 1024 * 1024) }]);
    await assert.rejects(readArchive(chunked(tar2, 64 * 1024), { ...LIMITS, maxUnpackedBytes: 8 * 1024 * 1024 }, second.into), /pre could not be unpacked \(EISDIR|EEXIST\)/);
  });

  test('an abort stops the unpacking with its reason: before it starts, and while chunks still come', async () => {
    const before = new AbortController();
    before.abort(new Error('the build was cancelled'));
    await assert.rejects(readArchive(chunked(await tarOf([DOCKERFILE])), LIMITS, undefined, before.signal), /the build was cancelled/);
    // Midway: the input aborts the unpacking after its first chunks, then would go on for good.
    const midway = new AbortController();
    const tar = await tarOf([DOCKERFILE, { name: 'big', body: Buffer.alloc(512 * 1024) }]);
    async function* slow(): AsyncGenerator<Buffer> {
      let sent = 0;
      for (;;) {
        yield tar.subarray(sent % tar.length, (sent % tar.length) + 4096);
        sent += 4096;
        if (sent === 8192) midway.abort(new Error('cancelled midway'));
        await new Promise((r) => setTimeout(r, 1));
      }
    }
    const { into } = await area();
    await assert.rejects(readArchive(slow(), LIMITS, into, midway.signal), /cancelled midway/);
    // A gzip archive is read ahead (a small one is decompressed whole): an abort ends that wait
    // too, while the rest of the archive has not come.
    const waiting = new AbortController();
    const gz = gzipSync(await tarOf([DOCKERFILE]));
    async function* stalled(): AsyncGenerator<Buffer> {
      yield gz.subarray(0, 20);
      await new Promise(() => {}); // the rest never comes
    }
    setTimeout(() => waiting.abort(new Error('cancelled while the archive came')), 50);
    await assert.rejects(readArchive(stalled(), LIMITS, (await area()).into, waiting.signal), /cancelled while the archive came/);
  });

  test('modes are as judged whatever the umask: files 0644 or 0755, directories 0755', async () => {
    const previous = process.umask(0o077);
    try {
      const { into } = await area();
      await readArchive(chunked(await tarOf([DOCKERFILE, { name: 'app/server.js', body: 'x' }, { name: 'bin/', type: 'directory' }, { name: 'bin/run', body: 'x', mode: 0o700 }])), LIMITS, into);
      assert.equal((await stat(join(into, 'app/server.js'))).mode & 0o777, 0o644);
      assert.equal((await stat(join(into, 'app'))).mode & 0o777, 0o755, 'a directory the archive implies');
      assert.equal((await stat(join(into, 'bin'))).mode & 0o777, 0o755, 'a directory the archive names');
      assert.equal((await stat(join(into, 'bin/run'))).mode & 0o777, 0o755);
    } finally {
      process.umask(previous);
    }
  });
});
