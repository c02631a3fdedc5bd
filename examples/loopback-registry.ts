// The registry on 127.0.0.1:5055 (Debian's docker-registry) that holds both the examples' base
// images (base-images.ts: `make run`, the CLI's tests, bench/build) and the tests' own images
// (packages/svcd/test/images.ts): one address, so one registry, one storage and one config,
// whichever starts it. The swarm lab serves the same storage in each node's namespace from this
// config. Each used to start its own registry on the same address with its own storage: after a
// bench had started the examples' one, make test pushed its images there, and the lab's nodes
// served a storage without them (seen in a full run: every swarm test failed).
import { spawn } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const LOOPBACK_REGISTRY = '127.0.0.1:5055';
const LOOPBACK_REGISTRY_DIR = '/var/tmp/svc-loopback-registry';
export const LOOPBACK_REGISTRY_CONFIG = join(LOOPBACK_REGISTRY_DIR, 'config.yml');

/** Where a loopback registry listens and keeps its config and data (a test's own, or the one above). */
export interface RegistryPlace {
  address: string;
  dir: string;
}

/** The header svc's loopback registry answers with (set in its config): its folder, so it is told from another. */
const MARK_HEADER = 'X-Svc-Loopback-Registry';

/** What answers on `address`: nothing, svc's registry of `dir`, or another registry. */
async function answering(address: string, dir: string): Promise<'none' | 'ours' | 'other'> {
  const r = await fetch(`http://${address}/v2/`).catch(() => null);
  if (r === null || !r.ok) return 'none';
  return r.headers.get(MARK_HEADER) === dir ? 'ours' : 'other';
}

/**
 * Starts the registry when none answers (it is kept, for the machine's life). A registry that
 * answers without this one's mark is another (an older svc's, with its own storage), which the
 * swarm lab could not serve: it is named, not used.
 */
export async function ensureLoopbackRegistry(say: (line: string) => void, place: RegistryPlace = { address: LOOPBACK_REGISTRY, dir: LOOPBACK_REGISTRY_DIR }): Promise<void> {
  const now = await answering(place.address, place.dir);
  if (now === 'ours') return;
  if (now === 'other') {
    const port = place.address.split(':').at(-1) ?? '';
    throw new Error(`a registry answers on ${place.address} that is not svc's loopback registry (data in ${place.dir}): an older svc's, with its images elsewhere? Stop the process listening there (ss -ltnp 'sport = :${port}' names it) and run this again`);
  }
  mkdirSync(place.dir, { recursive: true });
  const config = join(place.dir, 'config.yml');
  // Written whole, then renamed into place: a registry started at the same moment by another
  // process (the two lanes of make test) never reads it half-written.
  const written = `${config}.${String(process.pid)}`;
  writeFileSync(written, [
    'version: 0.1',
    'log: { level: error }',
    // delete: the tests remove images they pushed.
    `storage: { filesystem: { rootdirectory: ${join(place.dir, 'data')} }, delete: { enabled: true } }`,
    `http: { addr: ${place.address}, headers: { ${MARK_HEADER}: [${JSON.stringify(place.dir)}] } }`,
  ].join('\n'));
  renameSync(written, config);
  spawn('docker-registry', ['serve', config], { stdio: 'ignore', detached: true }).unref();
  for (let i = 0; i < 100 && (await answering(place.address, place.dir)) !== 'ours'; i++) await new Promise((r) => setTimeout(r, 100));
  if ((await answering(place.address, place.dir)) !== 'ours') throw new Error(`svc's registry does not answer on ${place.address} (Debian's docker-registry: apt-get install docker-registry)`);
  say(`started a registry on ${place.address} (Debian's docker-registry, data in ${place.dir})`);
}

/** Whether a registry serves this reference (HOST:PORT/REPO:TAG): a HEAD of its manifest. */
export function inRegistry(ref: string): Promise<boolean> {
  const rest = ref.slice(ref.indexOf('/') + 1);
  const [repo, tag] = [rest.slice(0, rest.lastIndexOf(':')), rest.slice(rest.lastIndexOf(':') + 1)];
  const accept = 'application/vnd.docker.distribution.manifest.v2+json';
  return fetch(`http://${ref.slice(0, ref.indexOf('/'))}/v2/${repo}/manifests/${tag}`, { method: 'HEAD', headers: { accept } }).then((r) => r.ok, () => false);
}
