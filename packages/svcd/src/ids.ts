import { randomBytes } from 'node:crypto';

/** Random lowercase hex identifier of `bytes` bytes (tenant, activity and record ids). */
export function hexId(bytes = 16): string {
  return randomBytes(bytes).toString('hex');
}
