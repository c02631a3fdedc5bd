// Tenant images may come only from Docker Hub or a registry on this machine's loopback
// (DECISIONS.md, Runtime): anything else could be used to make svc fetch from internal hosts.

const COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const PATH = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`);
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const DOCKER_HUB = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);
const LOOPBACK = /^(?:localhost|127(?:\.\d{1,3}){3}|\[::1\]):\d{1,5}$/;

export interface ImageReference {
  /** null for Docker Hub. */
  registry: string | null;
  path: string;
  tag: string | null;
  digest: string | null;
}

/** Parses an image reference; null when it is not one. */
export function parseImageReference(ref: string): ImageReference | null {
  let rest = ref.trim();
  let digest: string | null = null;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) return null;
  }
  let registry: string | null = null;
  const slash = rest.indexOf('/');
  if (slash > 0) {
    const first = rest.slice(0, slash);
    // A first component with a dot, a port or named localhost is a registry host.
    if (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('[')) {
      registry = first;
      rest = rest.slice(slash + 1);
    }
  }
  let tag: string | null = null;
  const colon = rest.lastIndexOf(':');
  if (colon >= 0) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) return null;
  }
  if (!PATH.test(rest)) return null;
  return { registry, path: rest, tag, digest };
}

/** Why the image is refused, or null when it is acceptable. */
export function imageRefusal(ref: string): string | null {
  const parsed = parseImageReference(ref);
  if (!parsed) return `invalid image reference ${JSON.stringify(ref)}`;
  if (parsed.registry === null || DOCKER_HUB.has(parsed.registry) || LOOPBACK.test(parsed.registry)) return null;
  return `image must come from Docker Hub or a loopback registry (127.0.0.1:PORT or localhost:PORT), not ${parsed.registry}`;
}

/** A registry address on this machine's loopback (HOST:PORT), the only kind svc pushes builds to. */
export function isLoopbackRegistry(address: string): boolean {
  return LOOPBACK.test(address);
}

/**
 * Where a service's builds are tagged: svc/<tenant>/<service>, under the build registry's
 * address when one is configured (--build-registry), so that the image can be pulled again.
 */
export function builtImageRepository(registry: string | null, tenantId: string, serviceId: string): string {
  return `${registry ? `${registry}/` : ''}svc/${tenantId}/${serviceId}`;
}

/** What a build of a service produces (builds issue): [registry/]svc/<tenant>/<service>:<build>. */
export function builtImageTag(registry: string | null, tenantId: string, serviceId: string, buildId: string): string {
  return `${builtImageRepository(registry, tenantId, serviceId)}:${buildId}`;
}

/** An image built here and kept only in the local engine (no build registry): nothing to pull it from. */
export function isLocallyBuilt(image: string): boolean {
  return image.startsWith('svc/');
}
