// The upstream of the proxy benches (bench/proxy, bench/tls): a fast HTTP server (Caddy's
// `respond` in a FROM scratch image with the binary's shared libraries) rather than busybox
// httpd, which opens a process per connection: a slow upstream would hide any difference between
// the proxies. Pushed to the tests' registry: svc pulls what it runs (a local-only tag failed
// every deploy).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { TEST_REGISTRY, buildImage, docker, ensureTestRegistry, finished, imagePresent } from '../packages/svcd/test/images.js';

export const UPSTREAM_IMAGE = `${TEST_REGISTRY}/svc-bench/caddy-respond:1`;
/** What it answers to every request. */
export const UPSTREAM_BODY = 'hello from the upstream';

export async function ensureUpstreamImage(): Promise<void> {
  await ensureTestRegistry();
  if (!(await imagePresent(UPSTREAM_IMAGE))) await buildUpstreamImage();
  // Every run: cheap when the registry has the layers, and right when it was wiped.
  await finished(await docker.getImage(UPSTREAM_IMAGE).push({ authconfig: {} }));
}

async function buildUpstreamImage(): Promise<void> {
  const libs = execFileSync('ldd', ['/usr/bin/caddy'], { encoding: 'utf8' })
    .split('\n')
    .map((l) => /(\/\S+)\s+\(0x/.exec(l)?.[1])
    .filter((p): p is string => !!p);
  const files: Record<string, { body: Buffer; mode?: number }> = { caddy: { body: readFileSync('/usr/bin/caddy'), mode: 0o755 } };
  const copies = ['COPY caddy /caddy'];
  for (const [i, lib] of libs.entries()) {
    files[`lib${i}`] = { body: readFileSync(lib), mode: 0o755 }; // the loader must be executable
    copies.push(`COPY lib${i} ${lib}`);
  }
  await buildImage(UPSTREAM_IMAGE, {
    Dockerfile: {
      body: ['FROM scratch', ...copies, 'ENV HOME=/ XDG_DATA_HOME=/ XDG_CONFIG_HOME=/', 'EXPOSE 8000', `CMD ["/caddy", "respond", "--listen", ":8000", "${UPSTREAM_BODY}"]`].join('\n'),
    },
    ...files,
  });
}
