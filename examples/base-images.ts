// The base images the examples build FROM, made on this machine (no registry on the internet is
// needed): Debian's static busybox, and Node 24 (the binary `make` brought, with the C libraries
// it links) beside it, each FROM scratch, pushed to the registry on loopback, 127.0.0.1:5055
// (loopback-registry.ts: Debian's docker-registry, started when none answers there; the tests'
// images live there too). svc builds pull every FROM image by
// its full name, and a loopback registry is one a tenant may use (DECISIONS: images).
// `make run` runs this once (an image already in the registry is kept); so does the CLI test.
// Run: node --import tsx examples/base-images.ts
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Docker from 'dockerode';
import { pack } from 'tar-fs';
import { ensureLoopbackRegistry, inRegistry, LOOPBACK_REGISTRY } from './loopback-registry.js';

/** Where the examples' Dockerfiles name their base images (FROM 127.0.0.1:5055/...). */
export const EXAMPLES_REGISTRY = LOOPBACK_REGISTRY;
export const EXAMPLE_BUSYBOX_IMAGE = `${EXAMPLES_REGISTRY}/svc-examples/busybox:1`;
export const EXAMPLE_NODE_IMAGE = `${EXAMPLES_REGISTRY}/svc-examples/node:24`;
const BUSYBOX = '/bin/busybox';

const docker = new Docker({ socketPath: '/var/run/docker.sock' });
const say = (line: string) => process.stderr.write(`examples: ${line}\n`);

function finished(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = out.find((o) => o.error);
      if (err || failed) reject(err ?? new Error(failed?.error));
      else resolve();
    }),
  );
}

/** Builds `image` from a context directory `fill` writes, and pushes it. */
async function buildAndPush(image: string, fill: (dir: string) => void): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-example-image-'));
  try {
    fill(dir);
    await finished(await docker.buildImage(pack(dir), { t: image, forcerm: true }));
    await finished(await docker.getImage(image).push({ authconfig: {} }));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function busyboxContext(dir: string): void {
  copyFileSync(BUSYBOX, join(dir, 'busybox'));
  writeFileSync(join(dir, 'Dockerfile'), ['FROM scratch', 'COPY busybox /bin/busybox', 'RUN ["/bin/busybox", "--install", "-s", "/bin"]', 'ENV PATH=/bin', 'WORKDIR /'].join('\n'));
}

/** Node (this very binary) and the shared libraries ldd says it needs, at their paths, plus busybox for a shell. */
function nodeContext(dir: string): void {
  busyboxContext(dir);
  const libs = execFileSync('ldd', [process.execPath], { encoding: 'utf8' })
    .split('\n')
    .map((l) => /(\/\S+) \(0x/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined);
  for (const lib of libs) {
    mkdirSync(join(dir, 'root', dirname(lib)), { recursive: true });
    copyFileSync(lib, join(dir, 'root', lib));
  }
  mkdirSync(join(dir, 'root', 'usr/local/bin'), { recursive: true });
  copyFileSync(process.execPath, join(dir, 'root', 'usr/local/bin/node'));
  writeFileSync(
    join(dir, 'Dockerfile'),
    ['FROM scratch', 'COPY busybox /bin/busybox', 'RUN ["/bin/busybox", "--install", "-s", "/bin"]', 'COPY root /', 'ENV PATH=/usr/local/bin:/bin', 'WORKDIR /app', 'CMD ["node"]'].join('\n'),
  );
}

export async function ensureExampleImages(): Promise<void> {
  if (!existsSync(BUSYBOX)) throw new Error(`${BUSYBOX} is missing (Debian's busybox-static: apt-get install busybox-static)`);
  await ensureLoopbackRegistry(say);
  for (const [image, fill] of [
    [EXAMPLE_BUSYBOX_IMAGE, busyboxContext],
    [EXAMPLE_NODE_IMAGE, nodeContext],
  ] as const) {
    if (await inRegistry(image)) continue;
    say(`building ${image} (FROM scratch, from this machine's files) and pushing it`);
    await buildAndPush(image, fill);
  }
}

// Run as a script (not imported by a test): paths compared once resolved, as a symlinked checkout names this file otherwise.
if (process.argv[1] !== undefined && realpathSync(import.meta.filename) === realpathSync(process.argv[1])) {
  await ensureExampleImages();
  say(`base images ready: ${EXAMPLE_BUSYBOX_IMAGE}, ${EXAMPLE_NODE_IMAGE}`);
}
