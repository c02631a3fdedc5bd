// The upstream of the proxy benches (bench/proxy, bench/tls): a fast HTTP server (Caddy's
// `respond` in a FROM scratch image with the binary's shared libraries) rather than busybox
// httpd, which opens a process per connection: a slow upstream would hide any difference between
// the proxies. Pushed to the tests' registry: svc pulls what it runs (a local-only tag failed
// every deploy).
import { TEST_REGISTRY, buildImage, caddyRespondImageFiles, docker, ensureTestRegistry, finished, imagePresent } from '../packages/svcd/test/images.js';

export const UPSTREAM_IMAGE = `${TEST_REGISTRY}/svc-bench/caddy-respond:1`;
/** What it answers to every request. */
export const UPSTREAM_BODY = 'hello from the upstream';

export async function ensureUpstreamImage(): Promise<void> {
  await ensureTestRegistry();
  if (!(await imagePresent(UPSTREAM_IMAGE))) await buildUpstreamImage();
  // Every run: cheap when the registry has the layers, and right when it was wiped.
  await finished(await docker.getImage(UPSTREAM_IMAGE).push({ authconfig: {} }));
}

function buildUpstreamImage(): Promise<void> {
  return buildImage(UPSTREAM_IMAGE, caddyRespondImageFiles(['--listen', ':8000', UPSTREAM_BODY]));
}
