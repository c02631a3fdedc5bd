import { randomBytes } from 'node:crypto';

/** Random lowercase hex identifier of `bytes` bytes (tenant, activity and record ids). */
export function hexId(bytes = 16): string {
  return randomBytes(bytes).toString('hex');
}

/**
 * A random id that sorts by creation time (milliseconds first), for records listed newest first
 * where several can share one second (deployments).
 */
export function timeOrderedId(nowMs: number): string {
  return nowMs.toString(16).padStart(12, '0') + randomBytes(6).toString('hex');
}
