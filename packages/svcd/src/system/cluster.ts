// The nodes of the cluster svc runs on (--runtime swarm, issue 21), for operators: list them,
// drain one (Swarm moves its tasks to the others; maintenance) and make it take tasks again.
import type { ClusterNode } from '@svc/contract';
import { ConflictError, NotFoundError } from '../errors.js';
import type { ClusterNodeInfo, ClusterNodes } from '../runtime/index.js';

const NOT_A_CLUSTER = 'svcd runs on one Docker Engine (--runtime docker): there are no cluster nodes';

export class Cluster {
  /** null: svcd runs on one engine. */
  constructor(private readonly nodes: ClusterNodes | null) {}

  async list(): Promise<{ nodes: ClusterNode[] }> {
    if (!this.nodes) throw new ConflictError(NOT_A_CLUSTER);
    return { nodes: (await this.nodes.nodes()).map(view) };
  }

  async setAvailability(node: string, availability: 'active' | 'drain'): Promise<ClusterNode> {
    if (!this.nodes) throw new ConflictError(NOT_A_CLUSTER);
    const changed = await this.nodes.setAvailability(node, availability);
    if (!changed) throw new NotFoundError('node not found');
    return view(changed);
  }

  /** How many nodes there are and how many are not ready (health detail); zeros on one engine. */
  async health(): Promise<{ total: number; down: number }> {
    if (!this.nodes) return { total: 0, down: 0 };
    const list = await this.nodes.nodes();
    return { total: list.length, down: list.filter((n) => n.state !== 'ready').length };
  }
}

function view(n: ClusterNodeInfo): ClusterNode {
  return {
    id: n.id,
    hostname: n.hostname,
    role: n.role,
    state: n.state,
    availability: n.availability,
    address: n.address,
    engine_version: n.engineVersion,
    tasks: n.tasks,
    memory_bytes: n.memoryBytes,
    cpus: n.cpus,
  };
}
