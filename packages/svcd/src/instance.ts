import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hexId } from './ids.js';

export class InstanceIdError extends Error {}

/**
 * This svcd's identity across restarts: kept in its data dir. Leases are held as
 * `<instance>/<boot>`, so a restarted svcd knows which leases its own dead predecessor held.
 */
export function loadInstanceId(dataDir: string): string {
  const file = join(dataDir, 'instance-id');
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, hexId(8), { flag: 'wx' });
  }
  const id = readFileSync(file, 'utf8').trim();
  // It names a folder svcd clears and removes (<--scratch-dir>/<instance>): anything but what it
  // writes (a `..`, a path) could name another one.
  if (!INSTANCE_ID.test(id)) {
    throw new InstanceIdError(`${file} holds no instance id (16 hex digits, as svcd writes it): ${JSON.stringify(id.slice(0, 40))}; remove the file and svcd writes a new one`);
  }
  return id;
}

const INSTANCE_ID = /^[0-9a-f]{16}$/;
