import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hexId } from './ids.js';

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
  return readFileSync(file, 'utf8').trim();
}
