// What a kind of resource needs of the runtime, checked before anything of it is written: on a
// runtime that cannot run it, creating one is a clear 409 rather than a record whose workload
// never comes up.
import { ConflictError } from '../errors.js';
import type { DriverCapabilities } from '../runtime/index.js';

const NEEDS = {
  /**
   * svcd and the proxy reach an environment: at its address on the tenant network (one engine),
   * or through its agent on a port its node publishes (a swarm, whose overlays svcd's host is not on).
   */
  reachableAgent: {
    met: (c: DriverCapabilities) => c.addressable || (c.allocatedPorts && c.agent),
    why: "svcd reaches them through svc-init's agent on a port their node publishes, and this runtime runs no svc-init",
  },
} as const;

/** Throws 409 when a runtime of these capabilities lacks `need` for `what` (plural: "environments"). */
export function requireCapability(capabilities: DriverCapabilities, need: keyof typeof NEEDS, what: string): void {
  if (!NEEDS[need].met(capabilities)) throw new ConflictError(`${what} are not available on this installation's runtime: ${NEEDS[need].why}`);
}
