// A "private network" host of the tests' own: a network namespace joined to the host by a veth
// pair on a 10.x /24 (RFC 1918), with a TCP server answering on the ports asked for. Tenant
// workloads must not reach it unless the operator allows it (--egress-allow); traffic never leaves
// this machine.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface PrivateHost {
  /** The namespace's address (10.213.N.2). */
  address: string;
  /** The host's own address on the veth (10.213.N.1): a host address tenants must not reach either. */
  hostAddress: string;
  /** What the server in the namespace answers on every port: `private host <port>`. */
  close(): Promise<void>;
}

/** Starts the namespace and a server answering on each of `ports`. */
export async function startPrivateHost(ports: number[]): Promise<PrivateHost> {
  const tag = randomBytes(3).toString('hex');
  const ns = `svct-${tag}`;
  const outside = `vth${tag}`;
  const inside = `vtn${tag}`;
  // 10.213.0.0/16 is not among Docker's default address pools (172.17-31/16, 192.168/20).
  const subnet = `10.213.${randomBytes(1)[0]! % 250}`;
  const address = `${subnet}.2`;
  const hostAddress = `${subnet}.1`;
  const ip = (...args: string[]) => run('ip', args);
  await ip('netns', 'add', ns);
  let server: ChildProcess | null = null;
  const close = async () => {
    server?.kill('SIGKILL');
    await ip('link', 'del', outside).catch(() => {});
    await ip('netns', 'del', ns).catch(() => {});
  };
  try {
    await ip('link', 'add', outside, 'type', 'veth', 'peer', 'name', inside);
    await ip('link', 'set', inside, 'netns', ns);
    await ip('addr', 'add', `${hostAddress}/24`, 'dev', outside);
    await ip('link', 'set', outside, 'up');
    await ip('netns', 'exec', ns, 'ip', 'addr', 'add', `${address}/24`, 'dev', inside);
    await ip('netns', 'exec', ns, 'ip', 'link', 'set', inside, 'up');
    await ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
    const script = `const net = require('node:net');
for (const port of ${JSON.stringify(ports)}) net.createServer((s) => s.end('private host ' + port + '\\n')).listen(port, '0.0.0.0', () => process.stdout.write(port + '\\n'));`;
    server = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    // Ready when every port has said so.
    await new Promise<void>((resolve, reject) => {
      let said = '';
      server!.stdout!.on('data', (b: Buffer) => {
        said += b.toString();
        if (said.trim().split('\n').length >= ports.length) resolve();
      });
      server!.on('exit', (code) => reject(new Error(`private host server exited (${code})`)));
    });
  } catch (err) {
    await close();
    throw err;
  }
  return { address, hostAddress, close };
}
