// Tenant images may come only from Docker Hub or a registry on this machine's loopback
// (DECISIONS.md, Runtime): anything else could be used to make svc fetch from internal hosts.
// And a tenant runs only images it could pull itself (DECISIONS.md, Beyond the spec): every
// deploy pulls the image by its full name and runs the image ID that pull left, so a copy that
// another tenant's build or the operator left in the engine never answers for a tenant's name;
// build outputs (svc/<tenant>/...) belong to the tenant that built them, in every spelling.

const COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const PATH = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`);
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const DOCKER_HUB = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);
// The port without leading zeros: 127.0.0.1:05000 is 127.0.0.1:5000 to the engine, and must be
// to the ownership rule too.
const LOOPBACK = /^(?:localhost|127(?:\.\d{1,3}){3}|\[::1\]):(?:[1-9]\d{0,3}|[1-5]\d{4}|6[0-4]\d{3}|65[0-4]\d{2}|655[0-2]\d|6553[0-5])$/;

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

/** What decides whose images a tenant may name. */
export interface ImageOwnership {
  tenantId: string;
  /** --build-registry (HOST:PORT on loopback), or null. */
  buildRegistry: string | null;
}

/** The image of a service created with await_build until its first build deploys it. */
export const NO_IMAGE = '';
export const AWAITS_BUILD = 'the service has no image yet: it is deployed by its first successful build (svc deploy, or POST /v1/services/{id}/sources then /builds)';

/**
 * Why a tenant may not run or build FROM this image, or null when it may: the registry rule,
 * image IDs (the engine would take them as a local image of anybody's), and build outputs of
 * other tenants, named locally, on Docker Hub's spelling or through any loopback spelling of the
 * build registry.
 */
export function tenantImageRefusal(ref: string, o: ImageOwnership): string | null {
  const refusal = imageRefusal(ref);
  if (refusal !== null) return refusal;
  const p = parseImageReference(ref);
  if (p === null) throw new Error(`imageRefusal passed ${JSON.stringify(ref)}, which does not parse`);
  // `sha256:<hex>` parses as repository "sha256"; 64 hex digits alone are an image ID to the engine.
  if (p.path === 'sha256' || (p.registry === null && /^[a-f0-9]{64}$/.test(p.path))) {
    return 'image IDs are not accepted: name an image as repository[:tag] or repository@sha256:digest';
  }
  const buildNamespace = p.path.startsWith('svc/') && (p.registry === null || DOCKER_HUB.has(p.registry) || sameLoopbackRegistry(p.registry, o.buildRegistry));
  if (buildNamespace && !p.path.startsWith(`svc/${o.tenantId}/`)) {
    return 'images under svc/ are build outputs and only the tenant that built them may run them';
  }
  return null;
}

/** 127.0.0.1:5000, localhost:5000 and [::1]:5000 all reach a registry listening on every loopback address. */
function sameLoopbackRegistry(registry: string, buildRegistry: string | null): boolean {
  if (buildRegistry === null || !LOOPBACK.test(registry)) return false;
  const port = (r: string) => Number(r.slice(r.lastIndexOf(':') + 1));
  return port(registry) === port(buildRegistry);
}

/**
 * The full name the engine pulls and looks up: registry, repository (library/ for Docker Hub's
 * official images), tag (latest unless a digest pins it) and digest. A full name is never read
 * as an image ID or an ID prefix, which a short bare name can be.
 */
export function canonicalImageReference(ref: string): string {
  const p = parseImageReference(ref);
  if (!p) throw new Error(`invalid image reference ${JSON.stringify(ref)}`);
  const hub = p.registry === null || DOCKER_HUB.has(p.registry);
  const registry = hub ? 'docker.io' : p.registry;
  const path = hub && !p.path.includes('/') ? `library/${p.path}` : p.path;
  const tag = p.tag ?? (p.digest ? null : 'latest');
  return `${registry}/${path}${tag ? `:${tag}` : ''}${p.digest ? `@${p.digest}` : ''}`;
}

/** What pulling a tenant's image needs of the engine. */
export interface ImagePuller {
  pullImage(image: string, signal?: AbortSignal): Promise<void>;
}

/**
 * Brings a tenant's image into the engine as the tenant could itself, for a deploy or a build's
 * FROM: pulled by its full name, except the tenant's own local build (no registry holds it). A
 * failed pull is an error naming the image: a local copy proves nothing about who may use it.
 * Returns the name the engine now holds the image under.
 */
export async function pullTenantImage(engine: ImagePuller, ref: string, signal: AbortSignal): Promise<string> {
  if (isLocallyBuilt(ref)) return ref;
  const name = canonicalImageReference(ref);
  try {
    await engine.pullImage(name, signal);
  } catch (err) {
    if (signal.aborted) throw err;
    // No cause: the engine's 5xx on a pull is usually the tenant's registry (unreachable,
    // broken), not the engine; an engine that is gone is told apart by asking it (deployer.ts).
    throw new Error(`image ${ref} could not be pulled: ${(err as Error).message}`);
  }
  return name;
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

/** The tenant whose build a tag names ([registry/]svc/<tenant>/<service>:<build>), or null. */
export function builtImageOwner(tag: string, registry: string | null): string | null {
  const rest = tag.startsWith('svc/') ? tag : registry !== null && tag.startsWith(`${registry}/svc/`) ? tag.slice(registry.length + 1) : null;
  return rest === null ? null : (/^svc\/([0-9a-f]+)\/[^/]+:[^/]+$/.exec(rest)?.[1] ?? null);
}

/** An image built here and kept only in the local engine (no build registry): nothing to pull it from. */
export function isLocallyBuilt(image: string): boolean {
  return image.startsWith('svc/');
}
