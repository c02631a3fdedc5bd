// A Docker Swarm of three engines on this one machine, for the swarm driver's tests (issue 21).
// Each node is a dockerd in a network namespace of its own (its own addresses, iptables and
// bridge), on a lab bridge with the host; the first is the manager. Entered with
// `nsenter --net=<namespace file>` (not `ip netns exec`, which remounts /sys and hides the cgroup
// mounts dockerd needs) and `unshare --uts` for a node name of its own. The host's engine sets
// FORWARD to DROP, so the lab bridge gets an ACCEPT rule for its own traffic.
//
// No registry is reachable: each node runs the tests' registry on its own loopback address, over
// the same storage as the host's (images.ts), so an image reference the tests push on the host
// (127.0.0.1:5055/...) is pulled under the same name on every node, as svc's rules want of a
// registry (loopback or Docker Hub).
//
// Each engine also listens on its address over TLS with client certificates (--tlsverify), from
// a CA the lab makes, as an operator would set up engines svcd reaches over the network.
//
// Everything is made fresh and removed by stop(); leftovers of a killed run are removed first.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import Docker from 'dockerode';
import { dockerOptions, type EngineTls } from '../src/runtime/docker/docker-runtime.js';
import { LOOPBACK_REGISTRY_CONFIG } from '../../../examples/loopback-registry.js';
import { TEST_REGISTRY, ensureTestRegistry } from './images.js';

/** The lab's bridge on the host, which the nodes' links are ports of. */
export const LAB_BRIDGE = 'svclab0';
const SUBNET_PREFIX = '10.77.0';
/** The host's own address on the lab bridge: a private network behind the nodes, as a LAN would be. */
export const LAB_HOST = `${SUBNET_PREFIX}.1`;
const NODE_COUNT = 3;
const STATE_DIR = '/var/lib/svclab';
const RUN_DIR = '/run/svclab';
const TLS_DIR = `${RUN_DIR}/tls`;
/** Where each engine listens over TLS, on its address. */
const ENGINE_TLS_PORT = 2376;

export interface LabNode {
  name: string;
  /** Its address on the lab bridge, where svcd and the proxy reach its published ports. */
  address: string;
  /** Its Engine API, on a unix socket of the host's file system. */
  engineUrl: string;
  /** Its Engine API over TLS on its address (client certificates: `SwarmLab.clientTls`). */
  tlsUrl: string;
  engine: Docker;
}

export interface SwarmLab {
  nodes: LabNode[];
  manager: LabNode;
  /** --swarm-node's value: NAME=URL for every node. */
  swarmNodeFlag: string;
  /** The lab CA and a client certificate it signed, which every engine's TLS listener takes. */
  clientTls: EngineTls;
  /** Cuts a node off the lab bridge (as a machine that died: nothing reaches it, it reaches nothing). */
  disconnect(node: string): void;
  /** Puts it back. */
  reconnect(node: string): void;
  stop(): Promise<void>;
}

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
const quiet = (cmd: string, args: string[]) => {
  try {
    sh(cmd, args);
  } catch {
    // absent already
  }
};

/**
 * Removes what a lab (this one, or a killed run's) left: engines, registries, the nodes'
 * containers, namespaces, bridge, rule, state. Everything is killed, nothing stopped gracefully:
 * the lab's state is thrown away, and the engines' own stop (each container's grace period, the
 * swarm's) took most of a minute of every run.
 */
function tearDown(children: ChildProcess[]): void {
  for (const c of children) c.kill('SIGKILL');
  for (let i = 1; i <= NODE_COUNT; i++) {
    // Engines, their containerd and shims, and registries (also a killed run's): found by their namespace.
    try {
      for (const pid of sh('ip', ['netns', 'pids', `svclab${String(i)}`]).split('\n').filter(Boolean)) quiet('kill', ['-9', pid]);
    } catch {
      // no such namespace
    }
  }
  killNodeContainers();
  // The engines' mounts (overlay layers, netns files) under the state and run directories.
  for (const dir of [STATE_DIR, RUN_DIR]) {
    if (!existsSync(dir)) continue;
    const mounts = sh('sh', ['-c', `grep -o ' ${dir}[^ ]*' /proc/mounts | sort -r || true`]).split('\n').map((m) => m.trim()).filter(Boolean);
    for (const m of mounts) quiet('umount', ['-l', m]);
    rmSync(dir, { recursive: true, force: true });
  }
  for (let i = 1; i <= NODE_COUNT; i++) {
    quiet('ip', ['netns', 'delete', `svclab${String(i)}`]);
    // The pair goes with its host end, also while something still holds the namespace.
    quiet('ip', ['link', 'delete', `svclab${String(i)}-h`]);
  }
  quiet('ip', ['link', 'delete', LAB_BRIDGE]);
  while (existsRule()) quiet('iptables', ['-D', 'FORWARD', '-i', LAB_BRIDGE, '-o', LAB_BRIDGE, '-j', 'ACCEPT']);
}

/**
 * The nodes' containers run in network namespaces of their own, outside the node's: found by the
 * cgroups each engine puts them under (--cgroup-parent svclab-<node>, in every hierarchy of
 * cgroup v1, or in v2's unified one), and killed; the cgroups go once empty.
 */
function killNodeContainers(): void {
  const groups = (existsSync('/sys/fs/cgroup/cgroup.controllers') ? ['/sys/fs/cgroup'] : readdirSync('/sys/fs/cgroup').map((h) => `/sys/fs/cgroup/${h}`))
    .filter((root) => existsSync(`${root}/cgroup.procs`))
    .flatMap((root) => readdirSync(root).filter((d) => d.startsWith('svclab-')).map((d) => `${root}/${d}`));
  // Deepest first, so that a parent is empty when its turn comes.
  const dirs = groups.flatMap((g) => sh('find', [g, '-type', 'd']).split('\n').filter(Boolean)).sort((x, y) => y.length - x.length);
  const procsOf = (dir: string) => {
    try {
      return readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n').filter(Boolean);
    } catch {
      return [];
    }
  };
  for (const dir of dirs) for (const pid of procsOf(dir)) quiet('kill', ['-9', pid]);
  for (const dir of dirs) {
    // A killed process leaves its cgroup a moment later.
    for (let i = 0; i < 20 && procsOf(dir).length > 0; i++) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    try {
      rmdirSync(dir);
    } catch {
      // still busy: an empty leftover the next lab removes
    }
  }
}

function existsRule(): boolean {
  try {
    sh('iptables', ['-C', 'FORWARD', '-i', LAB_BRIDGE, '-o', LAB_BRIDGE, '-j', 'ACCEPT']);
    return true;
  } catch {
    return false;
  }
}

/**
 * A CA, a server certificate per node for its address and a client certificate, made with
 * openssl as Docker's guide to protecting the daemon socket has it (EC keys: quick to make).
 */
function makeTls(nodes: Array<{ name: string; address: string }>): EngineTls {
  mkdirSync(TLS_DIR, { recursive: true });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  sh('openssl', ['req', '-x509', ...key, '-keyout', `${TLS_DIR}/ca-key.pem`, '-out', `${TLS_DIR}/ca.pem`, '-days', '2', '-subj', '/CN=svclab-ca']);
  const sign = (name: string, extensions: string) => {
    sh('openssl', ['req', ...key, '-keyout', `${TLS_DIR}/${name}-key.pem`, '-out', `${TLS_DIR}/${name}.csr`, '-subj', `/CN=${name}`]);
    writeFileSync(`${TLS_DIR}/${name}.ext`, extensions);
    sh('openssl', ['x509', '-req', '-in', `${TLS_DIR}/${name}.csr`, '-CA', `${TLS_DIR}/ca.pem`, '-CAkey', `${TLS_DIR}/ca-key.pem`, '-CAcreateserial', '-out', `${TLS_DIR}/${name}-cert.pem`, '-days', '2', '-extfile', `${TLS_DIR}/${name}.ext`]);
  };
  for (const n of nodes) sign(n.name, `subjectAltName=IP:${n.address}\nextendedKeyUsage=serverAuth\n`);
  sign('client', 'extendedKeyUsage=clientAuth\n');
  const read = (file: string) => readFileSync(`${TLS_DIR}/${file}`, 'utf8');
  return { ca: read('ca.pem'), cert: read('client-cert.pem'), key: read('client-key.pem') };
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown = null;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`swarm lab: ${what} not within ${String(ms / 1000)} s${last instanceof Error ? `: ${last.message}` : ''}`);
}

export async function startSwarmLab(): Promise<SwarmLab> {
  const children: ChildProcess[] = [];
  tearDown(children);
  await ensureTestRegistry();
  mkdirSync(STATE_DIR, { recursive: true });
  mkdirSync(RUN_DIR, { recursive: true });
  try {
    sh('ip', ['link', 'add', LAB_BRIDGE, 'type', 'bridge']);
    sh('ip', ['addr', 'add', `${SUBNET_PREFIX}.1/24`, 'dev', LAB_BRIDGE]);
    sh('ip', ['link', 'set', LAB_BRIDGE, 'up']);
    sh('iptables', ['-I', 'FORWARD', '-i', LAB_BRIDGE, '-o', LAB_BRIDGE, '-j', 'ACCEPT']);
    const names = Array.from({ length: NODE_COUNT }, (_, i) => ({ name: `node${String(i + 1)}`, address: `${SUBNET_PREFIX}.${String(11 + i)}` }));
    const clientTls = makeTls(names);
    const nodes: LabNode[] = [];
    for (let i = 1; i <= NODE_COUNT; i++) {
      const name = `node${String(i)}`;
      const ns = `svclab${String(i)}`;
      const address = `${SUBNET_PREFIX}.${String(10 + i)}`;
      sh('ip', ['netns', 'add', ns]);
      sh('ip', ['link', 'add', `${ns}-h`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
      sh('ip', ['link', 'set', `${ns}-h`, 'master', LAB_BRIDGE, 'up']);
      const enter = ['--net=/run/netns/' + ns];
      sh('nsenter', [...enter, 'sh', '-c', `ip link set lo up && ip addr add ${address}/24 dev eth0 && ip link set eth0 up && ip route add default via ${SUBNET_PREFIX}.1`]);
      const socket = `${RUN_DIR}/${name}.sock`;
      const log = openSync(`${RUN_DIR}/${name}.log`, 'a');
      const dockerd = spawn(
        'nsenter',
        [
          ...enter,
          'unshare',
          '--uts',
          '--',
          'sh',
          '-c',
          `hostname ${name} && exec dockerd --data-root ${STATE_DIR}/${name} --exec-root ${RUN_DIR}/${name} --pidfile ${RUN_DIR}/${name}.pid -H unix://${socket} ` +
            `-H tcp://${address}:${String(ENGINE_TLS_PORT)} --tlsverify --tlscacert ${TLS_DIR}/ca.pem --tlscert ${TLS_DIR}/${name}-cert.pem --tlskey ${TLS_DIR}/${name}-key.pem ` +
            `--cgroup-parent svclab-${name} --bip 172.31.${String(i)}.1/24`,
        ],
        { stdio: ['ignore', log, log] },
      );
      children.push(dockerd);
      // The tests' registry on the node's own loopback, over the host's storage.
      children.push(spawn('nsenter', [...enter, 'docker-registry', 'serve', LOOPBACK_REGISTRY_CONFIG], { stdio: 'ignore' }));
      const url = `unix://${socket}`;
      nodes.push({ name, address, engineUrl: url, tlsUrl: `https://${address}:${String(ENGINE_TLS_PORT)}`, engine: new Docker(dockerOptions(url, 60_000)) });
    }
    for (const n of nodes) await until(`${n.name}'s engine`, () => n.engine.ping().then(() => true), 60_000);
    const [manager] = nodes;
    if (!manager) throw new Error('no nodes');
    // Overlay subnets from a pool of the lab's own, clear of the host's networks.
    // A heartbeat every second: a node that died is seen down within seconds rather than 15 or more.
    await manager.engine.swarmInit({
      ListenAddr: `${manager.address}:2377`,
      AdvertiseAddr: manager.address,
      DefaultAddrPool: ['10.78.0.0/16'],
      SubnetSize: 24,
      Spec: { Dispatcher: { HeartbeatPeriod: 1_000_000_000 } },
    });
    const swarm = (await manager.engine.swarmInspect()) as { JoinTokens: { Worker: string } };
    for (const n of nodes.slice(1)) await n.engine.swarmJoin({ ListenAddr: `${n.address}:2377`, AdvertiseAddr: n.address, RemoteAddrs: [`${manager.address}:2377`], JoinToken: swarm.JoinTokens.Worker });
    await until(
      'three ready nodes',
      async () => {
        const list = (await manager.engine.listNodes()) as Array<{ Status?: { State?: string } }>;
        return list.filter((n) => n.Status?.State === 'ready').length === NODE_COUNT ? true : undefined;
      },
      60_000,
    );
    // Workloads run on the workers only, as on a cluster whose manager is kept for managing: a
    // test can take a worker away without taking the swarm's manager with it.
    const managers = ((await manager.engine.listNodes()) as Array<{ ID: string; Version: { Index: number }; Spec: Record<string, unknown> & { Role?: string } }>).filter((n) => n.Spec.Role === 'manager');
    for (const n of managers) await manager.engine.getNode(n.ID).update({ ...n.Spec, Availability: 'drain', version: n.Version.Index });
    const [registryHost = '', registryPort = ''] = TEST_REGISTRY.split(':');
    for (let i = 1; i <= NODE_COUNT; i++) {
      // A TCP connect from inside the node's namespace (Node itself: the machine has no nc).
      const probe = `require('net').connect(${registryPort}, '${registryHost}').on('connect', () => process.exit(0)).on('error', () => process.exit(1))`;
      await until(`the registry on node${String(i)}`, () => Promise.resolve(sh('nsenter', [`--net=/run/netns/svclab${String(i)}`, process.execPath, '-e', probe]) === '' ? true : undefined), 30_000);
    }
    return {
      nodes,
      manager,
      swarmNodeFlag: nodes.map((n) => `${n.name}=${n.engineUrl}`).join(','),
      clientTls,
      disconnect: (node) => sh('ip', ['link', 'set', `svclab${node.replace('node', '')}-h`, 'down']),
      reconnect: (node) => sh('ip', ['link', 'set', `svclab${node.replace('node', '')}-h`, 'up']),
      stop: () => {
        tearDown(children);
        return Promise.resolve();
      },
    };
  } catch (err) {
    tearDown(children);
    throw err;
  }
}
