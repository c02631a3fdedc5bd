// The registry on 127.0.0.1:5055 (Debian's docker-registry) that holds both the examples' base
// images (base-images.ts: `make run`, the CLI's tests, bench/build) and the tests' own images
// (packages/svcd/test/images.ts): one address, so one registry, one storage and one config,
// whichever starts it. The swarm lab serves the same storage in each node's namespace from this
// config. Each used to start its own registry on the same address with its own storage: after a
// bench had started the examples' one, make test pushed its images there, and the lab's nodes
// served a storage without them (seen in a full run: every swarm test failed).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const LOOPBACK_REGISTRY = '127.0.0.1:5055';
const LOOPBACK_REGISTRY_DIR = '/var/tmp/svc-loopback-registry';
export const LOOPBACK_REGISTRY_CONFIG = join(LOOPBACK_REGISTRY_DIR, 'config.yml');

/** Where a loopback registry listens and keeps its config and data (a test's own, or the one above). */
export interface RegistryPlace {
  address: string;
  dir: string;
}

const answers = (address: string) => fetch(`http://${address}/v2/`).then((r) => r.ok, () => false);

/**
 * Starts the registry when none answers (it is kept, for the machine's life). A registry that
 * answers without this config is another one (an older svc's, with its own storage), which the
 * swarm lab could not serve: it is named, not used.
 */
export async function ensureLoopbackRegistry(say: (line: string) => void, place: RegistryPlace = { address: LOOPBACK_REGISTRY, dir: LOOPBACK_REGISTRY_DIR }): Promise<void> {
  const config = join(place.dir, 'config.yml');
  if (await answers(place.address)) {
    if (existsSync(config)) return;
    throw new Error(
      `a registry answers on ${place.address} that is not svc's loopback registry (no ${config}): an older svc's, with images elsewhere? Stop it (pkill -f 'docker-registry serve') and run this again`,
    );
  }
  mkdirSync(place.dir, { recursive: true });
  writeFileSync(config, [
    'version: 0.1',
    'log: { level: error }',
    // delete: the tests remove images they pushed.
    `storage: { filesystem: { rootdirectory: ${join(place.dir, 'data')} }, delete: { enabled: true } }`,
    `http: { addr: ${place.address} }`,
  ].join('\n'));
  spawn('docker-registry', ['serve', config], { stdio: 'ignore', detached: true }).unref();
  for (let i = 0; i < 100 && !(await answers(place.address)); i++) await new Promise((r) => setTimeout(r, 100));
  if (!(await answers(place.address))) throw new Error(`no registry answers on ${place.address} (Debian's docker-registry: apt-get install docker-registry)`);
  say(`started a registry on ${place.address} (Debian's docker-registry, data in ${place.dir})`);
}
