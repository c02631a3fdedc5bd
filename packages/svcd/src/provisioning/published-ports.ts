// The ports of --swarm-ports a swarm publishes svc's workloads on, on the node that runs each
// (a service's port, an environment's agent): one per owner for its life, allocated at its first
// run under the store's claim (store/published-ports.ts), so that a route a moment stale reaches
// its owner or nothing, never another's task on a port the node handed on.
import { ConflictError } from '../errors.js';
import { isUniqueViolation, type PortHolderTable, type Repositories } from '../store/index.js';
import { pickFreePort } from './host-ports.js';

/**
 * How long a given-up published port rests before it is given again: far longer than its task
 * takes to stop (10 s grace) and its route to leave every proxy (3 s reconcile, 5 s proxy check),
 * so that no stale route reaches the next owner's task.
 */
export const PORT_REST_S = 600;
/** Allocations lost to another owner's in a row before one gives up (each loser reads the ports anew). */
const PORT_ALLOCATION_TRIES = 5;

export interface PortOwner {
  table: PortHolderTable;
  id: string;
  /** Its port now (null: none yet); undefined when its record is gone. */
  current(): Promise<number | null | undefined>;
  /** Who it is and what its user does about a failure, for the errors: "the service", "deploy again". */
  what: string;
  retry: string;
}

/**
 * The owner's port: the one it holds while that is in `range`; else (none yet, or the operator
 * changed --swarm-ports since: the nodes' published-ports gate covers the range only) one picked
 * among the free and claimed for it. `now` in unix seconds.
 */
export async function publishedPortFor(store: Pick<Repositories, 'publishedPorts'>, owner: PortOwner, range: { from: number; to: number }, now: () => number): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const current = await owner.current();
    if (current === undefined) throw new Error(`the record of ${owner.what} is gone`);
    if (current !== null && current >= range.from && current <= range.to) return current;
    if (current !== null) {
      if (attempt >= PORT_ALLOCATION_TRIES) throw new ConflictError(`the port of ${owner.what} outside --swarm-ports could not be given up: ${owner.retry}`);
      await store.publishedPorts.release(owner.table, owner.id, current, now());
      continue;
    }
    const port = pickFreePort(await store.publishedPorts.taken(now() - PORT_REST_S), range, '--swarm-ports');
    try {
      // false: another run of the same owner allocated one first; it is read above.
      await store.publishedPorts.allocate(owner.table, owner.id, port);
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      if (attempt >= PORT_ALLOCATION_TRIES) throw new ConflictError(`no port of --swarm-ports could be allocated: others took the ports picked ${String(PORT_ALLOCATION_TRIES)} times; ${owner.retry}`);
    }
  }
}

/** Ports of --swarm-ports: free (neither held, resting, nor promised to an owner not run yet) and in all. */
export interface PortFigures {
  free: number;
  total: number;
}

/** What the figures read of the store. */
export interface PortFigureReads {
  publishedPorts: Pick<Repositories['publishedPorts'], 'awaiting' | 'taken'>;
}

/** The figures of `range` now (`now` in unix seconds). */
export async function readPortFigures(store: PortFigureReads, range: { from: number; to: number }, now: number): Promise<PortFigures> {
  // Services not deployed yet (await_build, or their first deploy to come) and environments not
  // run yet on the swarm take one each too. Read before the ports held, in separate statements:
  // an owner whose first run takes its port between the two reads (its column and its claim are
  // written in one transaction) is then counted twice, its promise and its port, never not at
  // all. Read the other way round it was counted in neither, and a create was let through with
  // the last port just taken (seen in a full run: a 503 from the environment's first run where
  // the test asked for the 409).
  const promised = await store.publishedPorts.awaiting();
  const held = new Set((await store.publishedPorts.taken(now - PORT_REST_S)).filter((p) => p >= range.from && p <= range.to));
  const total = range.to - range.from + 1;
  return { free: Math.max(0, total - held.size - promised), total };
}

/**
 * Refuses a new service or environment (409) when every port of the range is held, resting or
 * promised: its first run could only fail. Ones created at the same moment may still take the
 * last port between this and their first run, which then fails saying so.
 */
export async function assertPortLeft(store: PortFigureReads, range: { from: number; to: number }, now: number): Promise<void> {
  const ports = await readPortFigures(store, range, now);
  if (ports.free <= 0) {
    throw new ConflictError(
      `every port of --swarm-ports is taken (${String(ports.total)} ports, one per service and per environment for its life; a port given up rests ${String(PORT_REST_S / 60)} minutes): delete a service or an environment, or ask the operator to widen --swarm-ports`,
    );
  }
}
