// Keeps tenant containers away from svcd's own API port on the host.
//
// A container on a bridge network reaches the host at its gateway address, so an API that
// listens on a non-loopback address (0.0.0.0, a LAN address) would be open to every tenant
// container, past any address-based trust. Every tenant bridge is named with TENANT_BRIDGE_PREFIX,
// so one iptables rule with an interface wildcard covers them all, present and future:
//   INPUT -i svc-+ -p tcp --dport <api port> -j REJECT --reject-with tcp-reset
// Connections the host opens to containers (Caddy to a service, the loopback database port) are
// untouched: their replies are not new connections to the API port.
// A rule per port rather than a chain of our own: several svcd processes may share a host (and
// the tests run many in one), and each adds and removes only its own rule.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/** Tenant bridges are named svc-<first 11 hex digits of the tenant id> (15 bytes: Linux's cap). */
export const TENANT_BRIDGE_PREFIX = 'svc-';

export function tenantBridgeName(tenantId: string): string {
  return `${TENANT_BRIDGE_PREFIX}${tenantId.slice(0, 11)}`;
}

export type Iptables = (args: string[]) => Promise<void>;

const execFileAsync = promisify(execFile);
const systemIptables: Iptables = async (args) => {
  await execFileAsync('iptables', ['-w', ...args]);
};

export class HostFirewall {
  private readonly shielded = new Set<number>();

  constructor(private readonly iptables: Iptables = systemIptables) {}

  /** Refuses connections from tenant bridges to this TCP port of the host. Idempotent. */
  async shield(port: number): Promise<void> {
    const rule = this.rule(port);
    // -C fails when the rule is missing (also after a SIGKILL left one behind: then it is kept).
    const present = await this.iptables(['-C', ...rule]).then(() => true, () => false);
    if (!present) await this.iptables(['-I', ...rule]);
    this.shielded.add(port);
  }

  async close(): Promise<void> {
    for (const port of this.shielded) await this.iptables(['-D', ...this.rule(port)]).catch(() => {});
    this.shielded.clear();
  }

  private rule(port: number): string[] {
    return [
      'INPUT', '-i', `${TENANT_BRIDGE_PREFIX}+`, '-p', 'tcp', '--dport', String(port),
      '-m', 'comment', '--comment', 'svc: tenant containers may not reach the svcd API',
      '-j', 'REJECT', '--reject-with', 'tcp-reset',
    ];
  }
}
