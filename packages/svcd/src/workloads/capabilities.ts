// What a kind of resource needs of the runtime, checked before anything of it is written: on a
// runtime that cannot run it (Docker Swarm, for now), creating one is a clear 409 rather than a
// record whose workload never comes up.
import { ConflictError } from '../errors.js';
import type { DriverCapabilities, Runtime } from '../runtime/index.js';

const WHY: Record<'addressable', string> = {
  addressable: 'svcd reaches them at their address on the tenant network, and the overlay networks of a swarm are not on svcd\'s host',
};

/** Throws 409 when the runtime lacks `need` for `what` (plural: "databases"). */
export async function requireCapability(runtime: Pick<Runtime, 'capabilities'>, need: keyof typeof WHY, what: string): Promise<void> {
  const capabilities: DriverCapabilities = await runtime.capabilities();
  if (!capabilities[need]) throw new ConflictError(`${what} are not available on this installation's runtime (Docker Swarm) yet: ${WHY[need]}`);
}
