// Host ports for databases (--database-ports) and task boards (--kanban-ports): each keeps its
// port for its life, recorded under a unique constraint that settles two creates racing for one.
import { randomInt } from 'node:crypto';
import { ConflictError } from '../errors.js';

/**
 * A port of the range that `used` does not hold. Starts at a random place so that concurrent
 * creates seldom pick the same one (the unique constraint makes the loser retry).
 */
export function pickFreePort(used: Iterable<number>, range: { from: number; to: number }, flag: string): number {
  const taken = new Set(used);
  const size = range.to - range.from + 1;
  const start = randomInt(size);
  for (let i = 0; i < size; i++) {
    const port = range.from + ((start + i) % size);
    if (!taken.has(port)) return port;
  }
  throw new ConflictError(`no free host port: every port of ${flag} is taken`);
}

/** The engine could not publish the port: something outside svc holds it. */
export function isPortInUse(err: unknown): boolean {
  return /port is already allocated|address already in use/i.test((err as Partial<Error> | null | undefined)?.message ?? '');
}
