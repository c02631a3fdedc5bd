// svcd on Docker Swarm (issue 21, --runtime swarm), on a swarm of three engines this test makes
// (swarm-lab.ts): services run as Swarm services with their port published on the node that runs
// the task, and the proxy on svcd's host reaches them there.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { get as httpsGet } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { SvcClient } from '@svc/client';
import Docker from 'dockerode';
import { dockerOptions } from '../src/runtime/docker/docker-runtime.js';
import { NodeFirewalls, builtTenantInit, readNodeTenantInit, tenantNetworkName } from '../src/runtime/index.js';
import { HELPER_NAME } from '../src/runtime/swarm/node-firewall.js';
import { AGENT_PORT } from '../src/environments/agent.js';
import { ADMIN_TOKEN, freePort, newTenant, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, EXITER_IMAGE, RESPONDER_BODY, RESPONDER_IMAGE, TEST_REGISTRY, ensureTestImages, finished, pushToRegistry } from './images.js';
import { NODE_IMAGE, REDIS_IMAGE, ensureDbImages, ensureNodeImage } from './operator-images.js';
import { LAB_BRIDGE, LAB_HOST, startSwarmLab, type LabNode, type SwarmLab } from './swarm-lab.js';
import { dockerfile, startGitServer, startHttpsGitServer, type GitServer, type HttpsGitServer } from './git-fixtures.js';
import { finishedBuild } from './service-fixtures.js';

const run = promisify(execFile);
const redisCli = (url: string, ...args: string[]) => run('redis-cli', ['-u', url, '--no-auth-warning', ...args], { timeout: 20_000 }).then((r) => r.stdout.trim());
/** The Redis and Node stand-ins where the nodes (and the manager, for the board's build) pull from. */
const SWARM_REDIS_IMAGE = `${TEST_REGISTRY}/${REDIS_IMAGE}`;
const SWARM_NODE_IMAGE = `${TEST_REGISTRY}/${NODE_IMAGE}`;
/** The node whose engine svcd reaches over TLS (a worker). */
const TLS_NODE = 'node3';

/** GET /_ping of an engine at https://, with or without a client certificate: its status, or the error. */
function pingOverTls(url: string, tls: { ca: string; cert?: string; key?: string }): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const req = httpsGet({ host: hostname, port: Number(port), path: '/_ping', ...tls, timeout: 5_000 }, (res) => {
      res.resume();
      resolve(String(res.statusCode));
    });
    req.on('error', (err) => resolve(`error: ${err.message}`));
    req.on('timeout', () => req.destroy(new Error('timed out')));
  });
}

interface SwarmTask {
  ServiceID: string;
  NodeID: string;
  /** A task Swarm is replacing keeps State running with DesiredState shutdown while its node is away. */
  DesiredState: string;
  Status: { State: string; Err?: string; ContainerStatus?: { ContainerID?: string }; PortStatus?: { Ports?: Array<{ PublishedPort?: number; TargetPort?: number; PublishMode?: string }> } };
}

/**
 * svcd's warnings and errors on the file's standard error as they come, which the report prints
 * among the tests' lines: what svcd did about the nodes and the proxy (a firewall run that failed,
 * a node unmarked, Caddy exiting) is what a failure here needs first.
 */
const svcdWarnings = {
  push(line: string): void {
    let level = 0;
    try {
      level = (JSON.parse(line) as { level: number }).level;
    } catch {
      level = 50; // not pino's JSON: shown, whatever it is
    }
    if (level >= 40) process.stderr.write(`svcd ${level >= 50 ? 'error' : 'warning'}: ${line.trim().slice(0, 800)}\n`);
  },
};

describe('svcd on a Docker Swarm of three engines', () => {
  let lab: SwarmLab;
  let t: TestServer;
  let proxyPort = 0;
  let git: GitServer;
  let httpsGit: HttpsGitServer;
  let warmImages: Promise<unknown> = Promise.resolve();
  const undo: Array<() => Promise<unknown>> = [];
  const control = (name: string) => createServer((_req, res) => res.end(`${name} control answered\n`));
  const allowed = control('allowed');
  const closed = control('closed');
  const portOf = (server: Server) => (server.address() as AddressInfo).port;

  before(async () => {
    await ensureTestImages();
    await ensureDbImages();
    await ensureNodeImage();
    lab = await startSwarmLab();
    await pushToRegistry(REDIS_IMAGE, SWARM_REDIS_IMAGE);
    await pushToRegistry(NODE_IMAGE, SWARM_NODE_IMAGE);
    // The database's and the board's images onto every node while the first tests run (their
    // pulls are most of those tests' time otherwise); awaited where they are needed.
    // Best effort, one image at a time per node, on a client without an idle timeout (a layer's
    // extraction can be silent for long): a pull that fails is Swarm's to do again.
    warmImages = Promise.all(
      lab.nodes.map(async (n) => {
        const engine = new Docker(dockerOptions(n.engineUrl, 0));
        for (const image of [SWARM_REDIS_IMAGE, SWARM_NODE_IMAGE]) await finished(await engine.pull(image)).catch(() => {});
      }),
    ).catch(() => {});
    undo.push(() => lab.stop());
    // Two HTTP servers on the lab bridge's host address (a private network behind the nodes):
    // one port opened to tasks with --egress-allow, the other not (the node rules' control).
    for (const server of [allowed, closed]) {
      await new Promise<void>((resolve) => server.listen(0, LAB_HOST, resolve));
      undo.push(() => new Promise((resolve) => server.close(resolve)));
    }
    // A build's RUN steps probe the same two ports, and the manager node's own engine port.
    const probe = (what: string, host: string, port: number) => `RUN echo "probe ${what}: $(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 ${host} ${String(port)} || echo unreachable)"`;
    git = await startGitServer({
      probes: {
        Dockerfile: dockerfile(probe('allowed', LAB_HOST, portOf(allowed)), probe('closed', LAB_HOST, portOf(closed)), probe('node', lab.manager.address, 2376), 'COPY index.html /www/index.html'),
        'index.html': 'built on the swarm\n',
      },
      // What the build test tries while the manager's label is off: another repository, so that a
      // try that got past the check (the label back meanwhile) leaves nothing cached for the probes.
      early: {
        Dockerfile: dockerfile('COPY index.html /www/index.html'),
        'index.html': 'an early try\n',
      },
    });
    undo.push(() => git.stop());
    // An environment's sync clones over HTTPS only.
    httpsGit = await startHttpsGitServer();
    undo.push(() => httpsGit.stop());
    proxyPort = await freePort();
    t = await startServer({
      realTime: true,
      config: {
        runtime: 'swarm',
        dockerHost: lab.manager.engineUrl,
        // node3's engine over TLS with a client certificate, as on a network; the others on their sockets.
        swarmNodes: Object.fromEntries(lab.nodes.map((n) => [n.name, n.name === TLS_NODE ? n.tlsUrl : n.engineUrl])),
        engineTls: { [lab.nodes.find((n) => n.name === TLS_NODE)?.tlsUrl ?? '']: lab.clientTls },
        // The node firewall's helper: the busybox image has sleep and chroot (runtime/swarm/node-firewall.ts).
        swarmHelperImage: BUSYBOX_IMAGE,
        egressAllow: [{ cidr: `${LAB_HOST}/32`, port: portOf(allowed) }],
        // svcd and its proxy reach the nodes from the host's address on the lab bridge.
        swarmPublishedFrom: [`${LAB_HOST}/32`],
        buildRegistry: TEST_REGISTRY,
        sandbox: 'auto',
        proxyListen: `127.0.0.1:${String(proxyPort)}`,
        adminTokens: [ADMIN_TOKEN],
        databaseImages: { postgres: `${TEST_REGISTRY}/svc-test/postgres:15`, redis: SWARM_REDIS_IMAGE },
        kanbanImage: SWARM_NODE_IMAGE,
        gitCaFile: httpsGit.caFile,
        // The environments' templates: Node is what the preview's server needs.
        environmentImages: { default: SWARM_NODE_IMAGE, node: SWARM_NODE_IMAGE, python: SWARM_NODE_IMAGE, go: SWARM_NODE_IMAGE },
      },
      overrides: { readyTimeoutMs: 60_000 },
      logLines: svcdWarnings,
    });
    undo.push(() => t.close());
  });

  after(async () => {
    for (const step of undo.reverse()) await step();
  });

  const tasksOf = async (serviceName: string): Promise<SwarmTask[]> =>
    (await lab.manager.engine.listTasks({ filters: { service: [serviceName] } })) as SwarmTask[];

  /** The container of a task, inspected on the engine of the lab node that runs it, and that node. */
  const taskContainer = async (task: SwarmTask): Promise<{ node: LabNode; container: Docker.ContainerInspectInfo }> => {
    const nodeName = ((await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string } }>).find((n) => n.ID === task.NodeID)?.Description.Hostname;
    const node = lab.nodes.find((n) => n.name === nodeName) ?? assert.fail('the task runs on no lab node');
    return { node, container: await node.engine.getContainer(task.Status.ContainerStatus?.ContainerID ?? '').inspect() };
  };

  /**
   * svc's own workloads (databases, boards) start through svc-init --exec, which sets
   * no-new-privileges and becomes their command (a service spec cannot ask for the flag on Engine
   * 20.10; the flag itself is read by svc-init's Go test, the lab's gVisor /proc does not show it).
   */
  const assertStartsWithoutPrivilegeGain = async (task: SwarmTask, command: RegExp): Promise<void> => {
    const { container } = await taskContainer(task);
    assert.match(container.Path, /^\/\.svc\/[0-9a-f]{16}$/);
    assert.equal(container.Args[0], '--exec', JSON.stringify(container.Args));
    assert.ok(container.Mounts.some((m) => m.Destination === '/.svc' && !m.RW && m.Name === 'svc-init'), JSON.stringify(container.Mounts));
    assert.match(container.Args.join(' '), command);
  };

  /** A command in svcd's helper container on a node (node-firewall.ts), with the node's usual PATH for chroot; its stdout. */
  const inHelper = async (node: { engineUrl: string }, cmd: string[]): Promise<string> =>
    (await run('docker', ['-H', node.engineUrl, 'exec', '-e', 'PATH=/usr/sbin:/usr/bin:/sbin:/bin', HELPER_NAME, ...cmd])).stdout;
  /** The node's own iptables (or ip6tables), as svcd runs it there. */
  const nodeIptables = (node: { engineUrl: string }, family: string, args: string[]) => inHelper(node, ['chroot', '/host', family, '-w', ...args]);

  /** A new service (of the busybox image unless told), once running (the last status seen in the error otherwise), and its host on the proxy. */
  async function runningService(client: SvcClient, name: string, image = BUSYBOX_IMAGE): Promise<{ id: string; host: string }> {
    const s = await client.createService({ name, image });
    let last = '';
    const running = await waitFor(`${name} running`, async () => {
      const now = await client.service(s.id);
      last = `${now.status}: ${now.last_error ?? ''}`;
      return now.status === 'running' ? now : undefined;
    }, 90_000).catch((err: unknown) => assert.fail(`${String(err)} (last seen ${last})`));
    return { id: s.id, host: new URL(running.url ?? assert.fail('no url')).host };
  }

  test('a service runs as a Swarm service, published on its node in host mode, and answers through the proxy', async () => {
    const { client } = await newTenant(t);
    const s = await runningService(client, 'web');
    const { host } = s;
    const page = await waitFor('the page through the proxy', () => viaProxy(proxyPort, host, '/index.html').then((r) => (r.status === 200 ? r : undefined)));
    assert.match(page.body, /hello/i);
    // What svc made is a Swarm service whose task publishes its port on its node, in host mode.
    const services = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } });
    assert.equal(services.length, 1);
    const tasks = await tasksOf(services[0]?.ID ?? '');
    const task = tasks.find((x) => x.Status.State === 'running' && x.DesiredState === 'running');
    assert.ok(task, 'a running task');
    assert.equal(task.Status.PortStatus?.Ports?.[0]?.PublishMode, 'host');
    // On the port svcd allocated for the service (--swarm-ports), not one the node picked.
    const allocated = (await t.deps.store.services.findAny(s.id))?.published_port ?? assert.fail('no port allocated');
    assert.ok(allocated >= 30_000 && allocated <= 32_767, String(allocated));
    assert.equal(task.Status.PortStatus.Ports[0].PublishedPort, allocated);
    // Hardened as far as a service spec goes: the container on its node has every capability
    // dropped and the tenant's pids, memory and CPU limits.
    const { node, container } = await taskContainer(task);
    assert.deepEqual(container.HostConfig.CapDrop, ['ALL']);
    assert.ok((container.HostConfig.PidsLimit ?? 0) > 0 && (container.HostConfig.Memory ?? 0) > 0 && (container.HostConfig.NanoCpus ?? 0) > 0, JSON.stringify(container.HostConfig));
    // The tenant's command runs under svc-init, from the node's volume, read only: PID 1 is
    // svc-init, and httpd descends from it (svc-init sets no-new-privileges for what it runs,
    // which a service spec cannot on Engine 20.10: its Go test reads the flag under the host's
    // kernel; the lab's nodes run gVisor, whose /proc does not show it). The exec's own shell,
    // which the engine starts beside them, is the probe's control: it does not descend from it.
    assert.match(container.Path, /^\/\.svc\/[0-9a-f]{16}$/);
    // Under gVisor: the node's engine runs it by default (svc's label on the node says so, and the
    // service asks for the label), and the health detail offers the sandbox.
    assert.equal(container.HostConfig.Runtime, 'runsc');
    assert.match((await t.deps.runtime.sandboxVersion()) ?? 'none', /gVisor/);
    assert.ok(container.Mounts.some((m) => m.Destination === '/.svc' && !m.RW && m.Name === 'svc-init'), JSON.stringify(container.Mounts));
    const { stdout: tree } = await run('docker', ['-H', node.engineUrl, 'exec', container.Id, 'sh', '-c', 'echo "exec $$"; for d in /proc/[0-9]*; do echo "$(cat $d/comm) $(cut -d " " -f 1,4 $d/stat)"; done']);
    const processes = tree.trim().split('\n').map((line) => line.split(' ') as [comm: string, pid: string, ppid: string]);
    const underInit = (pid: string | undefined): boolean => {
      for (let p = pid, hops = 0; p !== undefined && p !== '0' && hops < 20; p = processes.find(([, q]) => q === p)?.[2], hops++) if (p === '1') return true;
      return false;
    };
    // Its command name is its file's (the build's hash), cut to the kernel's 15 characters.
    assert.deepEqual(processes.find(([, pid]) => pid === '1')?.[0], container.Path.split('/').at(-1)?.slice(0, 15), tree);
    assert.ok(underInit(processes.find(([comm]) => comm === 'httpd')?.[1]), tree);
    assert.ok(!underInit(processes.find(([comm]) => comm === 'exec')?.[1]), tree);
    // Its logs come through the manager, whatever node the task is on.
    // Asked again when busybox httpd drops the connection (RESPONDER_IMAGE, images.ts).
    await waitFor('the marker logged', () => viaProxy(proxyPort, host, '/cgi-bin/log?swarm-marker').then((r) => (r.status === 200 ? true : undefined)));
    await waitFor('the line in its log', async () => ((await client.serviceLogs(s.id, 50)).includes('log: swarm-marker') ? true : undefined));
    // Another service gets a port of its own; a redeploy keeps the service's.
    const other = await runningService(client, 'web2');
    const otherPort = (await t.deps.store.services.findAny(other.id))?.published_port;
    assert.ok(typeof otherPort === 'number' && otherPort !== allocated, `${String(otherPort)} beside ${String(allocated)}`);
    await client.deleteService(other.id);
    // Deleted: the Swarm service goes.
    await client.deleteService(s.id);
    await waitFor('the swarm service removed', async () => ((await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } })).length === 0 ? true : undefined));
  });

  test("a new tenant's first services, made at once, all run: the tenant's overlay network is made once, by whichever apply comes first", async () => {
    const { client, id } = await newTenant(t);
    // Each deploy makes the network when it is missing: made together, two creates can both pass
    // the engine's check for the name, and Swarm's store refuses the second with a 500.
    const made = await Promise.all(['one', 'two', 'three', 'four'].map((name) => client.createService({ name, image: BUSYBOX_IMAGE })));
    try {
      for (const s of made) {
        const now = await waitFor(`${s.name} deployed`, async () => {
          const x = await client.service(s.id);
          return x.status === 'running' || x.status === 'failed' ? x : undefined;
        }, 90_000);
        assert.equal(now.status, 'running', `${s.name}: ${now.last_error ?? ''}`);
      }
      const network = tenantNetworkName(id);
      const networks = (await lab.manager.engine.listNetworks({ filters: { name: [network] } })).filter((n) => n.Name === network);
      assert.deepEqual(networks.map((n) => [n.Driver, n.Scope]), [['overlay', 'swarm']]);
    } finally {
      for (const s of made) await client.deleteService(s.id);
    }
  });

  test('a redeploy is rolling: the new task starts on the other worker beside the old one, on the same port, the route moves, and not one request through the proxy fails', async () => {
    const { client } = await newTenant(t);
    // A server that answers every connection (busybox httpd drops a few under load: images.ts).
    const s = await runningService(client, 'rolling', RESPONDER_IMAGE);
    const { host } = s;
    await waitFor('the page', () => viaProxy(proxyPort, host, '/').then((r) => (r.status === 200 ? r : undefined)));
    const allocated = (await t.deps.store.services.findAny(s.id))?.published_port ?? assert.fail('no port allocated');
    const swarmServices = () => lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } });
    const runningTask = async (serviceId: string) => (await tasksOf(serviceId)).find((x) => x.Status.State === 'running' && x.DesiredState === 'running');
    const [old] = await swarmServices();
    const oldTask = await runningTask(old?.ID ?? '');
    assert.ok(old && oldTask, 'a running task');
    const ask = () => viaProxy(proxyPort, host, '/').then((r) => `${String(r.status)} ${r.body.trim()}`, (err: unknown) => String(err));
    const OK = `200 ${RESPONDER_BODY}`;
    const answers: string[] = [];
    let atFailure = '';
    const loading = { on: true };
    // One request at a time, back to back, for the whole redeploy (and a moment after).
    const load = (async () => {
      while (loading.on) {
        const answer = await ask();
        answers.push(answer);
        // At the first failure, every task of the resource's Swarm services and the service's route.
        if (answer !== OK && atFailure === '') {
          const row = await t.deps.store.services.findAny(s.id);
          const tasks = await swarmServices()
            .then((list) => (list.length === 0 ? [] : lab.manager.engine.listTasks({ filters: { service: list.map((x) => x.ID) } })))
            .then((list) => (list as SwarmTask[]).map((x) => [x.ServiceID, x.NodeID, x.Status.State, x.DesiredState, x.Status.Err ?? '']), (err: unknown) => String(err));
          atFailure = JSON.stringify({ tasks, status: row?.status, upstream: row?.upstream, container: row?.container_id, old: old.ID });
        }
      }
    })();
    let replaced: { ID?: string; Spec?: { Name?: string; Labels?: Record<string, string> } } | undefined;
    try {
      await client.serviceAction(s.id, 'redeploy');
      replaced = await waitFor(
        'the new Swarm service serving, the old one gone',
        async () => {
          const now = await client.service(s.id);
          const list = await swarmServices();
          return now.status === 'running' && list.length === 1 && list[0]?.ID !== old.ID ? list[0] : undefined;
        },
        120_000,
      );
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      loading.on = false;
      await load;
    }
    // No moment where nothing answers: a redeploy that removed the old task first failed every
    // request for seconds on end.
    const failed = answers.map((x, i) => [i, x] as const).filter(([, x]) => x !== OK);
    assert.deepEqual(failed, [], `${String(failed.length)} of ${String(answers.length)} requests failed; at the first: ${atFailure}`);
    assert.ok(answers.length >= 20, `only ${String(answers.length)} requests were made`);
    process.stderr.write(`swarm: a rolling redeploy: ${String(answers.length)} requests, none failed\n`);
    // Beside the old task: on the other worker, on the service's own port, which it keeps.
    const newTask = await runningTask(replaced.ID ?? '');
    assert.ok(newTask, 'the new service runs a task');
    assert.notEqual(newTask.NodeID, oldTask.NodeID, 'on the other worker');
    assert.equal(newTask.Status.PortStatus?.Ports?.[0]?.PublishedPort, allocated);
    assert.equal((await t.deps.store.services.findAny(s.id))?.published_port, allocated);
    // Its Swarm name is another now (the old one had the plain name while both ran); the next
    // redeploy finds it by its workload name, sets it aside in turn, and the plain name comes back.
    const name = `svc-${s.id}`;
    const labelOf = (x: { Spec?: { Name?: string; Labels?: Record<string, string> } } | undefined) => [x?.Spec?.Name, x?.Spec?.Labels?.['svc.name']];
    assert.notEqual(labelOf(replaced)[0], name);
    assert.equal(labelOf(replaced)[1], name);
    await client.serviceAction(s.id, 'redeploy');
    const again = await waitFor('the second redeploy served, one Swarm service again', async () => {
      const now = await client.service(s.id);
      const list = await swarmServices();
      return now.status === 'running' && list.length === 1 && list[0]?.ID !== replaced.ID ? list[0] : undefined;
    }, 120_000);
    assert.deepEqual(labelOf(again), [name, name]);
    // Logs through the manager, by the service's ID: the request's line in its access log.
    await waitFor('the page after the second redeploy', () => viaProxy(proxyPort, host, '/after-rolling').then((r) => (r.status === 200 ? true : undefined)));
    await waitFor('the line in its log', async () => ((await client.serviceLogs(s.id, 50)).includes('/after-rolling') ? true : undefined));
    // A second Swarm service under the same workload name (as two svcd racing an apply would
    // leave): reconcile removes it and keeps the one the service runs.
    const live = (await lab.manager.engine.getService(again.ID).inspect()) as { Spec: Record<string, unknown> };
    await lab.manager.engine.createService({ ...live.Spec, Name: `${name}-second` } as never);
    assert.equal((await swarmServices()).length, 2);
    await t.deps.workloads.reconcile();
    assert.deepEqual((await swarmServices()).map((x) => x.ID), [again.ID]);
    await client.deleteService(s.id);
    await waitFor('the swarm service removed', async () => ((await swarmServices()).length === 0 ? true : undefined));
  });

  test("a service's HTTP health check is its readiness on a swarm too: a path its task serves makes it running, one it does not keeps it deploying", async () => {
    const { client } = await newTenant(t);
    const checked = await client.createService({ name: 'checked', image: BUSYBOX_IMAGE, health_check: { type: 'http', path: '/index.html' } });
    const unchecked = await client.createService({ name: 'unchecked', image: BUSYBOX_IMAGE, health_check: { type: 'http', path: '/healthz' } });
    let last = '';
    await waitFor('the checked one running', async () => {
      const now = await client.service(checked.id);
      last = `${now.status}: ${now.last_error ?? ''}`;
      return now.status === 'running' ? true : undefined;
    }, 90_000).catch((err: unknown) => assert.fail(`${String(err)} (last seen ${last})`));
    // The other's task runs as long (the same image, the same start), and its port accepts: its
    // check's 404 alone keeps it from running (asked through its node's published port).
    await waitFor('its task running', async () => {
      const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${unchecked.id}`] } });
      return (await tasksOf(service?.ID ?? '')).some((x) => x.Status.State === 'running') ? true : undefined;
    }, 90_000);
    await new Promise((r) => setTimeout(r, 4_000));
    const waiting = await client.service(unchecked.id);
    assert.equal(waiting.status, 'deploying', JSON.stringify(waiting));
    await client.deleteService(unchecked.id);
    await client.deleteService(checked.id);
  });

  test('an image that exits fails the deploy with its exit, instead of waiting for the deadline', async () => {
    const { client } = await newTenant(t);
    const started = Date.now();
    const s = await client.createService({ name: 'exits', image: EXITER_IMAGE });
    const failed = await waitFor('failed', async () => {
      const now = await client.service(s.id);
      return now.status === 'failed' ? now : undefined;
    }, 60_000);
    assert.match(failed.last_error ?? '', /exited/);
    assert.ok(Date.now() - started < 45_000, 'failed at the deadline, not at the exit');
    assert.equal((await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } })).length, 0, 'the failed deploy left its service');
  });

  test('a node lost under a running service: Swarm runs its task on another node, and the route follows', async () => {
    const { client } = await newTenant(t);
    const s = await runningService(client, 'moves');
    const { host } = s;
    await waitFor('the page', () => viaProxy(proxyPort, host, '/index.html').then((r) => (r.status === 200 ? r : undefined)));
    // The node running the service's task, whatever Swarm service svc runs it as now.
    const nodeIdOf = async () => {
      const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } });
      return (await tasksOf(service?.ID ?? '')).find((x) => x.Status.State === 'running' && x.DesiredState === 'running')?.NodeID;
    };
    const nodes = (await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string } }>;
    const before = await nodeIdOf();
    const lost = nodes.find((n) => n.ID === before)?.Description.Hostname ?? assert.fail('no node runs the task');
    lab.disconnect(lost);
    try {
      const lostAt = Date.now();
      // Operators see it: the node down, the health detail degraded.
      const operator = new SvcClient({ baseUrl: t.url, adminToken: ADMIN_TOKEN });
      await waitFor('the node seen down', async () => ((await operator.listClusterNodes()).find((n) => n.hostname === lost)?.state === 'down' ? true : undefined), 60_000);
      const health = await client.healthDetailed(true);
      assert.deepEqual(health.nodes, { total: 3, down: 1 });
      if (lost === TLS_NODE) {
        // svcd reaches this node's engine over the network it was cut off from: its rules cannot
        // be read either, and the detail says so rather than calling them in place.
        assert.equal(health.egress_firewall.installed, false);
        assert.match(health.egress_firewall.detail, /could not be read/);
      } else {
        // The node is down, not its rules (its engine, on a socket, still answers svcd): degraded for the node.
        assert.equal(health.egress_firewall.installed, true, health.egress_firewall.detail);
      }
      assert.equal(health.status, 'degraded');
      // The route answers again from the task's new node (Swarm's rescheduling is the floor).
      await waitFor('the page from another node', async () => {
        const now = await nodeIdOf();
        if (!now || now === before) return undefined;
        return viaProxy(proxyPort, host, '/index.html').then((r) => (r.status === 200 ? r : undefined));
      }, 120_000);
      process.stderr.write(`swarm: the service answered again ${String(Date.now() - lostAt)} ms after its node was cut off\n`);
      const after = await client.service(s.id);
      assert.equal(after.status, 'running');
      // A node's loss is not the tenant's code crashing: nothing is charged to its circuit.
      assert.equal(after.crash_count, 0, JSON.stringify(after));
    } finally {
      lab.reconnect(lost);
    }
  });

  test("operators list the nodes and drain one: its tasks move to another node, the route follows, and it takes tasks again once activated", async () => {
    const operator = new SvcClient({ baseUrl: t.url, adminToken: ADMIN_TOKEN });
    const nodes = await waitFor('three ready nodes', async () => {
      const list = await operator.listClusterNodes();
      return list.length === 3 && list.every((n) => n.state === 'ready') ? list : undefined;
    }, 90_000);
    assert.deepEqual(nodes.map((n) => n.hostname).sort(), ['node1', 'node2', 'node3']);
    const manager = nodes.find((n) => n.role === 'manager');
    assert.equal(manager?.availability, 'drain', "the lab keeps its manager's node free of tasks");
    for (const n of nodes) assert.ok(n.engine_version !== '' && n.memory_bytes > 0 && n.cpus > 0 && /^10\.77\.0\.1\d$/.test(n.address), JSON.stringify(n));
    const { client } = await newTenant(t);
    const s = await runningService(client, 'drained');
    const { host } = s;
    // This service's own task, and its node.
    const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } });
    const nodeOfTask = async () => (await tasksOf(service?.ID ?? '')).find((x) => x.Status.State === 'running' && x.DesiredState === 'running')?.NodeID;
    const first = await waitFor('its task', nodeOfTask);
    const withTask = nodes.find((n) => n.id === first) ?? assert.fail('its node is not listed');
    assert.ok(((await operator.listClusterNodes()).find((n) => n.id === first)?.tasks ?? 0) >= 1, 'the node counts its task');
    const drained = await operator.setClusterNodeAvailability(withTask.hostname, 'drain');
    assert.equal(drained.availability, 'drain');
    try {
      await waitFor('its task on the other worker, answering through the proxy', async () => {
        const now = await nodeOfTask();
        if (!now || now === first) return undefined;
        return viaProxy(proxyPort, host, '/index.html').then((r) => (r.status === 200 ? r : undefined));
      }, 90_000);
      assert.equal((await operator.listClusterNodes()).find((n) => n.id === first)?.tasks, 0, 'a drained node runs no task of svc');
      // Unknown nodes are 404; a name that is no node's id or host name is refused before.
      await assert.rejects(operator.setClusterNodeAvailability('node9', 'drain'), (err: { status?: number }) => err.status === 404);
      // Operators only: a tenant's key drains nothing.
      const { client: tenantClient } = await newTenant(t);
      assert.equal((await tenantClient.raw('POST', `/v1/system/nodes/${withTask.hostname}/activate`)).status, 401);
      assert.equal((await t.client.raw('POST', '/v1/system/nodes/..%2Fx/drain', { headers: { 'x-admin-token': ADMIN_TOKEN } })).status, 400);
    } finally {
      const back = await operator.setClusterNodeAvailability(withTask.id, 'active');
      assert.equal(back.availability, 'active');
    }
  });

  test("replicas: a task on each worker, on the service's port; the proxy balances them; a killed replica or a drained node's costs no request; each counts against the quota; scaled in place", async () => {
    const operator = new SvcClient({ baseUrl: t.url, adminToken: ADMIN_TOKEN });
    const { client } = await newTenant(t);
    // A server that answers every connection and logs each request (busybox httpd drops a few under load: images.ts).
    const s = await client.createService({ name: 'replicated', image: RESPONDER_IMAGE, replicas: 2 });
    assert.equal(s.replicas, 2);
    // Each replica is a service share of the tenant's quota (5 by default): 2 + 4 is past it, refused with nothing made.
    const quota = (err: { status?: number; message?: string }) => err.status === 409 && /quota exceeded: the replicas of the tenant's services would take 6 service shares/.test(err.message ?? '');
    await assert.rejects(client.createService({ name: 'too-many', image: RESPONDER_IMAGE, replicas: 4 }), quota);
    assert.deepEqual((await client.listServices()).map((x) => x.name), ['replicated']);
    // The usage says so: one service, two of its five shares used.
    assert.deepEqual((await client.usage()).services, { used: 2, max: 5 });
    const routes = async () => (await t.deps.store.services.findAny(s.id))?.upstream?.split(',') ?? [];
    let last = '';
    await waitFor('both replicas running and routed', async () => {
      const now = await client.service(s.id);
      const routed = await routes();
      last = `${now.status} ${now.last_error ?? ''} ${routed.join(',')}`;
      return now.status === 'running' && routed.length === 2 ? true : undefined;
    }, 90_000).catch((err: unknown) => assert.fail(`${String(err)} (last seen ${last})`));
    // One Swarm service of two replicas, at most one a node, each on the service's own port.
    const allocated = (await t.deps.store.services.findAny(s.id))?.published_port ?? assert.fail('no port allocated');
    const [service] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } })) as Array<{ ID: string; Spec: { Mode?: { Replicated?: { Replicas?: number } }; TaskTemplate?: { Placement?: { MaxReplicas?: number } } } }>;
    assert.ok(service);
    assert.equal(service.Spec.Mode?.Replicated?.Replicas, 2);
    assert.equal(service.Spec.TaskTemplate?.Placement?.MaxReplicas, 1);
    const running = async () => (await tasksOf(service.ID)).filter((x) => x.Status.State === 'running' && x.DesiredState === 'running');
    const tasks = await running();
    assert.equal(new Set(tasks.map((x) => x.NodeID)).size, 2, 'on two nodes');
    for (const x of tasks) assert.equal(x.Status.PortStatus?.Ports?.[0]?.PublishedPort, allocated);
    const host = new URL((await client.service(s.id)).url ?? assert.fail('no url')).host;

    // The proxy balances them: requests reach each replica (its own access log has them).
    for (let i = 0; i < 30; i++) assert.equal((await viaProxy(proxyPort, host, `/balanced-${String(i)}`)).status, 200);
    const nodesById = new Map(((await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string } }>).map((n) => [n.ID, n.Description.Hostname]));
    for (const x of tasks) {
      const node = lab.nodes.find((n) => n.name === nodesById.get(x.NodeID)) ?? assert.fail('a task on no lab node');
      const log = (await node.engine.getContainer(x.Status.ContainerStatus?.ContainerID ?? '').logs({ stdout: true, stderr: true })).toString();
      assert.match(log, /\/balanced-\d+/, `the replica on ${node.name} took none of 30 requests`);
    }
    // Metered each on its own, as a container on one engine is: a reading of each replica's
    // container, on its node.
    await t.deps.sampler.pass();
    for (const x of tasks) {
      const copy = `${nodesById.get(x.NodeID) ?? '?'}/${x.Status.ContainerStatus?.ContainerID ?? '?'}`;
      assert.equal((await t.deps.store.metering.lastSample(copy))?.resource_id, s.id, `no reading of the replica ${copy}`);
    }

    /** Requests back to back through the proxy while `during` runs (and a second after): every one answered 200. */
    const underLoad = async (what: string, during: () => Promise<void>, settle: () => Promise<void> = () => Promise.resolve()) => {
      const answers: string[] = [];
      const loading = { on: true };
      const load = (async () => {
        while (loading.on) answers.push(await viaProxy(proxyPort, host, '/').then((r) => String(r.status), (err: unknown) => String(err)));
      })();
      try {
        await during();
        await new Promise((r) => setTimeout(r, 1_000));
      } finally {
        loading.on = false;
        await load;
        await settle();
      }
      const failed = answers.filter((x) => x !== '200');
      assert.deepEqual(failed, [], `${String(failed.length)} of ${String(answers.length)} requests failed while ${what}`);
      assert.ok(answers.length >= 10, `only ${String(answers.length)} requests were made`);
      process.stderr.write(`swarm: ${what}: ${String(answers.length)} requests, none failed\n`);
    };

    // A replica killed: the crash is counted, the service keeps running on the other one (no
    // redeploy), and Swarm runs it again. Until svcd's next look, the route still names the dead
    // replica: a request sent there is tried on the other one.
    const victim = tasks[1] ?? assert.fail('no second task');
    const victimNode = lab.nodes.find((n) => n.name === nodesById.get(victim.NodeID)) ?? assert.fail('a task on no lab node');
    await underLoad('a replica was killed', async () => {
      await victimNode.engine.getContainer(victim.Status.ContainerStatus?.ContainerID ?? '').kill();
      await waitFor('the crash counted', async () => ((await client.service(s.id)).crash_count === 1 ? true : undefined), 60_000);
      await waitFor('both replicas running and routed again', async () => ((await routes()).length === 2 && (await running()).length === 2 ? true : undefined), 90_000);
    });
    const afterCrash = await client.service(s.id);
    assert.equal(afterCrash.status, 'running');
    assert.match(afterCrash.last_error ?? '', /a replica exited with code 137 \(crash 1 of 5 allowed in 10 minutes\); it is started again, and the running replicas serve meanwhile/);
    assert.equal((await client.deployments(s.id)).length, 1, 'no redeploy: the other replica served throughout');

    // A node drained: its replica stops (the other waits for a node of its own) and leaves the route.
    const drainedNode = nodesById.get(tasks[0]?.NodeID ?? '') ?? assert.fail('no node');
    await underLoad(
      "a replica's node was drained",
      async () => {
        await operator.setClusterNodeAvailability(drainedNode, 'drain');
        await waitFor('one replica routed', async () => ((await routes()).length === 1 && (await running()).length === 1 ? true : undefined), 60_000);
      },
      async () => {
        await operator.setClusterNodeAvailability(drainedNode, 'active');
      },
    );
    // Back: the waiting replica runs there again, passes the health check, and is routed.
    await waitFor('both replicas routed again', async () => ((await routes()).length === 2 ? true : undefined), 90_000);

    // Scaled in place: a deployment (reason scale) that changes the count of the same Swarm
    // service; the replica that stays keeps running (no task replaced), and the route follows.
    const swarmService = async () => ((await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } })) as Array<{ ID: string; Spec: { Mode?: { Replicated?: { Replicas?: number } } } }>)[0];
    const scaledTo = async (n: number) => {
      const scaled = await client.scaleService(s.id, n);
      assert.equal(scaled.deployment?.reason, 'scale');
      assert.equal(scaled.service.replicas, n);
      await waitFor(`${String(n)} replicas, running and routed`, async () => {
        const now = await client.service(s.id);
        const after = await swarmService();
        return now.status === 'running' && after?.Spec.Mode?.Replicated?.Replicas === n && (await routes()).length === n && (await running()).length === n ? true : undefined;
      }, 90_000);
      assert.equal((await client.deployments(s.id))[0]?.status, 'succeeded');
      assert.equal((await swarmService())?.ID, service.ID, 'the same Swarm service');
    };
    const containers = async () => (await running()).map((x) => x.Status.ContainerStatus?.ContainerID ?? '');
    const two = await containers();
    await scaledTo(1);
    const one = await containers();
    assert.ok(one.length === 1 && two.includes(one[0] ?? ''), 'the replica that stays is one that ran');
    await scaledTo(2);
    assert.ok((await containers()).includes(one[0] ?? ''), 'scaled up, the replica that ran still runs');
    assert.equal((await viaProxy(proxyPort, host, '/')).status, 200);
    await client.deleteService(s.id);
  });

  test("svc-init on every node, a file of its hash (which the node's label names) in the nodes' svc-init volume: a damaged copy is put back by the next pass", async () => {
    const node = lab.nodes[0] ?? assert.fail('no lab node');
    const list = (await lab.manager.engine.listNodes()) as Array<{ Description: { Hostname: string }; Spec: { Labels?: Record<string, string> } }>;
    const label = Object.keys(list.find((n) => n.Description.Hostname === node.name)?.Spec.Labels ?? {}).find((k) => k.startsWith('svc.tenant-init.')) ?? assert.fail('no svc-init label on the node');
    const prefix = label.slice('svc.tenant-init.'.length);
    const sum = () => inHelper(node, ['sha256sum', `/svc-init/${prefix}`]);
    assert.ok((await sum()).startsWith(prefix), 'the node holds the svc-init its label names');
    await inHelper(node, ['sh', '-c', `rm -f /svc-init/${prefix} && echo damaged > /svc-init/${prefix}`]);
    assert.ok(!(await sum()).startsWith(prefix), 'the probe tells a damaged copy');
    await (t.deps.nodeFirewalls ?? assert.fail('no node firewalls')).install();
    assert.ok((await sum()).startsWith(prefix), 'put back by the pass');
    // No partial file is left beside it.
    assert.doesNotMatch(await inHelper(node, ['ls', '/svc-init']), /partial/);
  });

  test("a service's published port answers only where svcd and its proxy run (--swarm-published-from): not from another node, over IPv4 or IPv6, nor by a route to the task's own address; without the nodes' gate the same probes answer", async () => {
    const { client } = await newTenant(t);
    // Caddy's respond, which answers every connection (busybox httpd drops some: images.ts).
    const s = await runningService(client, 'gated', RESPONDER_IMAGE);
    const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${s.id}`] } });
    const task = (await tasksOf(service?.ID ?? '')).find((x) => x.Status.State === 'running' && x.DesiredState === 'running') ?? assert.fail('no running task');
    const port = task.Status.PortStatus?.Ports?.[0]?.PublishedPort ?? assert.fail('no published port');
    const nodeName = ((await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string } }>).find((n) => n.ID === task.NodeID)?.Description.Hostname;
    const taskNode = lab.nodes.find((n) => n.name === nodeName) ?? assert.fail('the task runs on no lab node');
    const other = lab.nodes.find((n) => n !== taskNode && n !== lab.manager) ?? assert.fail('no other worker');
    const netns = (n: { name: string }) => `--net=/run/netns/svclab${n.name.replace('node', '')}`;
    // The task's node on the lab bridge, over IPv6 (link-local: the engine's docker-proxy listens on [::] too).
    const v6 = /inet6 (fe80::[0-9a-f:]+)\//.exec((await run('nsenter', [netns(taskNode), 'ip', '-6', 'addr', 'show', 'dev', 'eth0'])).stdout)?.[1] ?? assert.fail('no link-local address');
    // One probe for every side (Node itself: the machine has no nc): the first line of a GET, or what failed.
    const probe = async (from: { name: string } | 'host', host: string, to = port): Promise<string> => {
      const script = `const s = require('net').connect({ host: ${JSON.stringify(host)}, port: ${String(to)}, timeout: 3000 }, () => s.write('GET / HTTP/1.0\\r\\n\\r\\n')); let b = ''; s.on('data', (d) => { b += d; if (b.includes('\\n')) { console.log(b.split('\\r\\n')[0]); process.exit(0); } }); s.on('timeout', () => { console.log('no answer'); process.exit(0); }); s.on('error', (e) => { console.log(e.code); process.exit(0); });`;
      const argv = from === 'host' ? [process.execPath, '-e', script] : ['nsenter', netns(from), process.execPath, '-e', script];
      return (await run(argv[0] ?? '', argv.slice(1))).stdout.trim();
    };
    const otherV6 = `${v6}%eth0`;
    const hostV6 = `${v6}%${LAB_BRIDGE}`;
    const answers = async () => {
      const [host, otherV4, otherOverV6, hostOverV6] = await Promise.all([probe('host', taskNode.address), probe(other, taskNode.address), probe(other, otherV6), probe('host', hostV6)]);
      return { host, other: otherV4, otherV6: otherOverV6, hostV6: hostOverV6 };
    };
    // And past the published port: a neighbour that routes to the task's own address (on the
    // node's docker_gwbridge) through its node, at the task's own port.
    const bridge = (await taskNode.engine.getNetwork('docker_gwbridge').inspect()) as { Containers?: Record<string, { IPv4Address?: string }>; IPAM: { Config: Array<{ Subnet: string }> } };
    const taskIp = bridge.Containers?.[task.Status.ContainerStatus?.ContainerID ?? '']?.IPv4Address?.split('/')[0] ?? assert.fail('the task has no address on docker_gwbridge');
    const targetPort = task.Status.PortStatus?.Ports?.[0]?.TargetPort ?? assert.fail('no target port');
    const direct = () => probe(other, taskIp, targetPort);
    // Every probe at once: svcd's pass over the nodes' rules (every 30 s) puts the gate back, and
    // one that fell between the control's probes once left its last one unanswered.
    const everyProbe = async () => {
      const [all, straight] = await Promise.all([answers(), direct()]);
      return { ...all, direct: straight };
    };
    await run('nsenter', [netns(other), 'ip', 'route', 'add', `${taskIp}/32`, 'via', taskNode.address]);
    try {
      const gated = await everyProbe();
      assert.match(gated.host, /^HTTP\/1\.[01] 200/, `svcd's side answered: ${JSON.stringify(gated)}`);
      assert.deepEqual([gated.other, gated.otherV6, gated.hostV6, gated.direct], ['no answer', 'no answer', 'no answer', 'no answer'], JSON.stringify(gated));
      // The control: the node's gate taken out (its jumps), the same probes answer; the next pass puts it back.
      const takeGateOut = async (again: boolean) => {
        for (const family of ['iptables', 'ip6tables']) {
          for (const line of (await nodeIptables(taskNode, family, ['-t', 'mangle', '-S', 'PREROUTING'])).split('\n')) {
            if (line.includes('-j SVC-PUBLISHED')) await nodeIptables(taskNode, family, ['-t', 'mangle', '-D', ...line.replace(/^-A /, '').split(' ')]);
          }
        }
        for (const { Subnet } of bridge.IPAM.Config) await nodeIptables(taskNode, 'iptables', ['-t', 'mangle', '-D', 'PREROUTING', '!', '-i', 'docker_gwbridge', '-d', Subnet, '-m', 'comment', '--comment', 'svc: tasks only by their published ports', '-j', 'DROP']).catch((err: unknown) => {
          // The first time the rule must be there to be taken out; taken again, the pass may not have put it back yet.
          if (!again) throw err;
        });
      };
      const gateIsBack = async () => (await nodeIptables(taskNode, 'iptables', ['-t', 'mangle', '-S', 'PREROUTING'])).includes('-j SVC-PUBLISHED');
      // svcd's pass may put the gate back while the probes run (seen on a loaded machine): taken
      // out again and probed again then, at most three times; a probe that cannot answer still fails.
      let open = { host: '', other: '', otherV6: '', hostV6: '', direct: '' };
      for (let attempt = 0; attempt < 3; attempt++) {
        await takeGateOut(attempt > 0);
        open = await everyProbe();
        if (!(await gateIsBack())) break;
      }
      assert.match(open.other, /^HTTP\/1\.[01] 200/, `without the gate: ${JSON.stringify(open)}`);
      assert.match(open.otherV6, /^HTTP\/1\.[01] 200/, `without the gate: ${JSON.stringify(open)}`);
      assert.match(open.direct, /^HTTP\/1\.[01] 200/, `without the gate: ${JSON.stringify(open)}`);
      await (t.deps.nodeFirewalls ?? assert.fail('no node firewalls')).install();
      assert.deepEqual([await probe(other, taskNode.address), await direct()], ['no answer', 'no answer'], 'put back by the pass');
    } finally {
      await run('nsenter', [netns(other), 'ip', 'route', 'del', `${taskIp}/32`]).catch(() => undefined);
    }
    await client.deleteService(s.id);
  });

  test('a --swarm-node entry that names the wrong engine prepares nothing there: the node is not labelled ready, and the pass says why', async () => {
    const [first, second] = lab.nodes.filter((n) => n !== lab.manager);
    assert.ok(first && second);
    const marks: Array<[string, boolean]> = [];
    const cluster = ((await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string }; Status: { Addr: string; State: string } }>).map((n) => ({ id: n.ID, hostname: n.Description.Hostname, address: n.Status.Addr, state: n.Status.State }));
    const firewalls = new NodeFirewalls({
      // first's name, second's engine (and second's own, as it should be).
      nodes: new Map([[first.name, second.engineUrl], [second.name, second.engineUrl]]),
      clusterNodes: () => Promise.resolve(cluster),
      markNode: (hostname, ready) => {
        marks.push([hostname, ready]);
        return Promise.resolve();
      },
      log: { warn: () => undefined },
      helperImage: BUSYBOX_IMAGE,
      allow: [],
      tenantInit: await readNodeTenantInit(builtTenantInit()),
      published: { ranges: [{ from: 30000, to: 32767 }], allowFrom: [`${LAB_HOST}/32`] },
    });
    await assert.rejects(firewalls.install(), new RegExp(`${first.name}: the engine at its --swarm-node address is swarm node \\w+, not ${first.name}`));
    // Marked by node id where the engine proved it (a down entry may share a host name), by name where not.
    const secondId = cluster.find((n) => n.hostname === second.name)?.id ?? assert.fail('no id');
    assert.deepEqual(marks.filter(([node]) => node !== lab.manager.name).sort(), [[first.name, false], [secondId, true]].sort());
  });

  test("svcd reaches a node's engine over TLS with its client certificate (the node's rules are in place through it); the engine refuses a client without one", async () => {
    const node = lab.nodes.find((n) => n.name === TLS_NODE) ?? assert.fail('no TLS node');
    // The node's egress rules are installed through its engine, and svcd labels the node once
    // they are: over TLS here.
    await waitFor(`${TLS_NODE} labelled by svcd`, async () => {
      const list = (await lab.manager.engine.listNodes()) as Array<{ Description: { Hostname: string }; Spec: { Labels?: Record<string, string> } }>;
      return list.find((n) => n.Description.Hostname === TLS_NODE)?.Spec.Labels?.['svc.egress-rules'] === 'installed' ? true : undefined;
    }, 60_000);
    // The same probe of the engine: answered with the client certificate, refused without.
    assert.equal(await pingOverTls(node.tlsUrl, lab.clientTls), '200');
    assert.match(await pingOverTls(node.tlsUrl, { ca: lab.clientTls.ca }), /^error: .*(certificate|handshake|alert|socket hang up|ECONNRESET)/i);
    // And svcd's client checks the engine: with a CA that did not sign the engine's certificate,
    // nothing is asked of it (the same client, the lab's CA: answered).
    const otherCa = execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', '/dev/null', '-out', '-', '-days', '1', '-subj', '/CN=not-the-lab'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
    await new Docker(dockerOptions(node.tlsUrl, 5_000, lab.clientTls)).ping();
    await assert.rejects(new Docker(dockerOptions(node.tlsUrl, 5_000, { ...lab.clientTls, ca: otherCa })).ping(), /self.signed|unable to verify|certificate/i);
  });

  test("tenants' overlay networks are apart: a task reaches its own tenant's task over the overlay, never another tenant's", async () => {
    const a = await newTenant(t);
    const b = await newTenant(t);
    const [prober, sibling, foreign] = [await runningService(a.client, 'prober'), await runningService(a.client, 'sibling'), await runningService(b.client, 'foreign')];
    /** The task's address on its tenant's overlay network. */
    const overlayAddress = async (serviceId: string) => {
      const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${serviceId}`] } });
      const tasks = (await lab.manager.engine.listTasks({ filters: { service: [service?.ID ?? ''], 'desired-state': ['running'] } })) as Array<{ NetworksAttachments?: Array<{ Network: { Spec: { Name: string } }; Addresses: string[] }> }>;
      const attachment = tasks[0]?.NetworksAttachments?.find((n) => n.Network.Spec.Name.startsWith('tenant-'));
      return (attachment?.Addresses[0] ?? assert.fail('no overlay address')).split('/')[0];
    };
    const host = prober.host;
    const fetchFrom = async (target: string, expect: RegExp) => {
      let answer = '';
      // nc's 2 s can be missed on a loaded machine: a few tries for the answer expected. A try
      // the proxy reset counts as one: Caddy 2.6 resets connections it accepts while it loads new
      // routes (README, "Known limitations"), and every service created here changes them.
      // The proxy's own 502 is no try either: the prober's task was not reached at all (seen once
      // for four tries in a row, a second apart); it is asked again for up to 20 s.
      const until = Date.now() + 20_000;
      for (let i = 0; i < 4 && !expect.test(answer); ) {
        const r = await viaProxy(proxyPort, host, `/cgi-bin/fetch?${target}`).catch((err: unknown) => ({ status: 0, body: `the proxy: ${String(err)}` }));
        answer = r.body;
        if (r.status === 502 && Date.now() < until) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          continue;
        }
        i++;
      }
      return answer;
    };
    // The same probe, both ways: its own tenant's task answers over the overlay, the other tenant's does not.
    assert.match(await fetchFrom(`${String(await overlayAddress(sibling.id))}:8000`, /HTTP\/1\.[01] 200/), /HTTP\/1\.[01] 200/, "its own tenant's task");
    assert.match(await fetchFrom(`${String(await overlayAddress(foreign.id))}:8000`, /unreachable/), /unreachable/, "another tenant's task");
    // Nor through the nodes: every task's port is published on its node's address, where the proxy
    // reaches it (the route answers), and the node's rules refuse it to tasks, whichever node they
    // run on: its own port on its own node too (svc's helper on each node:
    // runtime/swarm/node-firewall.ts). Without the rules, the same probe answers 200 there
    // (docker_gwbridge leads to the node; seen).
    const nodes = (await lab.manager.engine.listNodes()) as Array<{ ID: string; Status: { Addr: string }; Spec: { Labels?: Record<string, string> } }>;
    // Tasks run only on nodes svc secured, which it marked.
    // Every node refuses every node's address to its tasks, in rules of its own (the lab's are
    // private addresses, which the non-public ranges refuse as well: nodes on public addresses
    // need these).
    for (const node of lab.nodes) {
      const egress = await nodeIptables(node, 'iptables', ['-S', 'SVC-GW-EGRESS']);
      for (const n of nodes) assert.match(egress, new RegExp(`-A SVC-GW-EGRESS -d ${n.Status.Addr.replaceAll('.', '\\.')}/32 .*svc: a swarm node.* -j REJECT`), egress);
    }
    for (const n of nodes) {
      assert.equal(n.Spec.Labels?.['svc.egress-rules'], 'installed', JSON.stringify(n.Spec));
      assert.equal(n.Spec.Labels['svc.sandbox'], 'gvisor', JSON.stringify(n.Spec));
      assert.ok(Object.entries(n.Spec.Labels ?? {}).some(([k, v]) => /^svc\.tenant-init\.[0-9a-f]{16}$/.test(k) && v === 'installed'), JSON.stringify(n.Spec));
    }
    const published = async (serviceId: string) => {
      const [service] = await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${serviceId}`] } });
      const constraints = (service?.Spec?.TaskTemplate)?.Placement?.Constraints ?? [];
      assert.equal(constraints.length, 3, JSON.stringify(constraints));
      assert.equal(constraints[0], 'node.labels.svc.egress-rules==installed');
      assert.match(constraints[1] ?? '', /^node\.labels\.svc\.tenant-init\.[0-9a-f]{16}==installed$/);
      // Every lab node runs gVisor by default: --sandbox auto sandboxes, on those nodes.
      assert.equal(constraints[2], 'node.labels.svc.sandbox==gvisor');
      const task = (await tasksOf(service?.ID ?? '')).find((x) => x.Status.State === 'running' && x.DesiredState === 'running') ?? assert.fail('no running task');
      const port = task.Status.PortStatus?.Ports?.[0]?.PublishedPort;
      assert.equal(typeof port, 'number', 'a published port');
      return { node: task.NodeID, address: `${nodes.find((n) => n.ID === task.NodeID)?.Status.Addr ?? assert.fail('no node')}:${String(port)}` };
    };
    const from = await published(prober.id);
    for (const target of [prober, sibling, foreign]) {
      await waitFor('the proxy reaches the published port', () => viaProxy(proxyPort, target.host, '/index.html').then((r) => r.status === 200), 10_000);
      const at = await published(target.id);
      process.stderr.write(`swarm: probing ${at.address} from a task on ${at.node === from.node ? 'the same node' : 'another node'}\n`);
      assert.match(await fetchFrom(at.address, /unreachable/), /unreachable/, `a published port on a node (${at.address})`);
    }
    // The same probe through the same node rules, to a private network behind the nodes: the port
    // --egress-allow opens answers, the other does not.
    assert.match(await fetchFrom(`${LAB_HOST}:${String(portOf(allowed))}`, /allowed control answered/), /allowed control answered/, 'an allowed destination');
    assert.match(await fetchFrom(`${LAB_HOST}:${String(portOf(closed))}`, /unreachable/), /unreachable/, 'a private destination not allowed');
    // In place on every node: a pass that a node's engine failed (a reset connection, on a loaded
    // machine) is made good by the next one, within 30 s.
    let health = await a.client.healthDetailed(true);
    for (const deadline = Date.now() + 40_000; !health.egress_firewall.installed && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 1_000));
      health = await a.client.healthDetailed(true);
    }
    assert.equal(health.egress_firewall.installed, true, health.egress_firewall.detail);
  });

  test("a database runs pinned to one node and published there; while that node is away it is unavailable, naming the node, never started empty elsewhere; back, its data is there", async () => {
    await warmImages;
    const { client } = await newTenant(t);
    const created = await client.createDatabase({ name: 'cache', type: 'redis' });
    const statusOf = async () => {
      const d = await client.database(created.id);
      return `${d.status}: ${d.last_error ?? ''}`;
    };
    await waitFor('the database running', async () => ((await client.database(created.id)).status === 'running' ? true : undefined), 120_000).catch(async (err: unknown) => assert.fail(`${String(err)} (last seen ${await statusOf()})`));
    // Its Swarm service is pinned to the node that runs it, by id.
    const [service] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${created.id}`] } })) as Array<{ ID: string; Spec: { TaskTemplate: { Placement?: { Constraints?: string[] } } } }>;
    if (!service) assert.fail('no swarm service for the database');
    const runningNode = async () => (await tasksOf(service.ID)).find((x) => x.Status.State === 'running' && x.DesiredState === 'running')?.NodeID;
    const nodeId = (await runningNode()) ?? assert.fail('no task of the database runs');
    assert.ok(service.Spec.TaskTemplate.Placement?.Constraints?.includes(`node.id==${nodeId}`), JSON.stringify(service.Spec.TaskTemplate.Placement));
    await assertStartsWithoutPrivilegeGain((await tasksOf(service.ID)).find((x) => x.Status.State === 'running' && x.DesiredState === 'running') ?? assert.fail('no task of the database runs'), /redis-server/);
    const nodes = (await lab.manager.engine.listNodes()) as Array<{ ID: string; Description: { Hostname: string }; Status: { Addr: string } }>;
    const home = nodes.find((n) => n.ID === nodeId) ?? assert.fail('its node is not listed');
    // The connection string names that node's address and the database's host port there: a
    // real client writes through it.
    const conn = await client.connectionString(created.id);
    const url = new URL(conn.connection_string);
    assert.equal(url.hostname, home.Status.Addr);
    assert.equal(Number(url.port), (await client.database(created.id)).host_port);
    assert.equal(await redisCli(conn.connection_string, 'SET', 'kept', 'on its node'), 'OK');
    const hostname = home.Description.Hostname;
    lab.disconnect(hostname);
    try {
      const unavailable = await waitFor('the database unavailable', async () => {
        const d = await client.database(created.id);
        return d.status === 'unavailable' ? d : undefined;
      }, 120_000).catch(async (err: unknown) => assert.fail(`${String(err)} (last seen ${await statusOf()})`));
      assert.match(unavailable.last_error ?? '', new RegExp(`swarm node ${hostname}, which holds its data, is (down|unknown|disconnected)`));
      assert.ok((await client.activity({ resource_type: 'database' })).some((e) => e.action === 'database.unavailable' && e.resource_id === created.id));
      // Not started anywhere else meanwhile (on an empty volume).
      const [now] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${created.id}`] } })) as Array<{ ID: string }>;
      const elsewhere = now ? (await tasksOf(now.ID)).filter((x) => x.NodeID !== nodeId && ['running', 'starting', 'preparing', 'assigned'].includes(x.Status.State)) : [];
      assert.deepEqual(elsewhere, [], 'no task of the database on another node');
    } finally {
      lab.reconnect(hostname);
    }
    await waitFor('the database running again', async () => ((await client.database(created.id)).status === 'running' ? true : undefined), 150_000).catch(async (err: unknown) => assert.fail(`${String(err)} (last seen ${await statusOf()})`));
    const again = await client.connectionString(created.id);
    assert.equal(new URL(again.connection_string).hostname, home.Status.Addr, 'on the same node');
    assert.equal(await redisCli(again.connection_string, 'GET', 'kept'), 'on its node', 'with its data');
    // Told once in the activity, however many tries it waited through.
    assert.equal((await client.activity({ resource_type: 'database' })).filter((e) => e.action === 'database.unavailable' && e.resource_id === created.id).length, 1);
    // Data from before the installation ran on a swarm (a row with data and no node): when its
    // workload must start again, it is not started empty on some node.
    await t.deps.store.databases.update(created.id, { node: null, updated_at: Math.floor(Date.now() / 1000) });
    const [current] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${created.id}`] } })) as Array<{ ID: string }>;
    await lab.manager.engine.getService(current?.ID ?? assert.fail('no swarm service for the database')).remove();
    const refused = await waitFor('the database with no node unavailable', async () => {
      const d = await client.database(created.id);
      return d.status === 'unavailable' ? d : undefined;
    }, 60_000).catch(async (err: unknown) => assert.fail(`${String(err)} (last seen ${await statusOf()})`));
    assert.match(refused.last_error ?? '', /made before svc ran on this swarm/);
    assert.deepEqual(await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${created.id}`] } }), [], 'no service started for it');
  });

  test("a task board is built on the manager, pushed to the cluster's registry, and runs pinned to one node; its url names that node", async () => {
    await warmImages;
    const { client } = await newTenant(t);
    await client.createKanban();
    const board = await waitFor('the board running', async () => {
      const b = await client.kanban();
      return b.status === 'running' ? b : undefined;
    }, 180_000).catch(async (err: unknown) => assert.fail(`${String(err)} (last seen ${JSON.stringify(await client.kanban())})`));
    const [service] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${board.id}`] } })) as Array<{ ID: string; Spec: { TaskTemplate: { ContainerSpec: { Image: string }; Placement?: { Constraints?: string[] } } } }>;
    if (!service) assert.fail('no swarm service for the board');
    assert.ok(service.Spec.TaskTemplate.ContainerSpec.Image.startsWith(`${TEST_REGISTRY}/svc/kanban:`), service.Spec.TaskTemplate.ContainerSpec.Image);
    const task = (await tasksOf(service.ID)).find((x) => x.Status.State === 'running' && x.DesiredState === 'running') ?? assert.fail('no task of the board runs');
    const nodeId = task.NodeID;
    await assertStartsWithoutPrivilegeGain(task, /node/);
    assert.ok(service.Spec.TaskTemplate.Placement?.Constraints?.includes(`node.id==${nodeId}`), JSON.stringify(service.Spec.TaskTemplate.Placement));
    const nodes = (await lab.manager.engine.listNodes()) as Array<{ ID: string; Status: { Addr: string } }>;
    const address = nodes.find((n) => n.ID === nodeId)?.Status.Addr ?? assert.fail('its node is not listed');
    assert.equal(board.url, `http://${address}:${String(board.host_port)}/`);
    // A browser on svcd's side reaches it there, and the admin token opens it.
    const health = await fetch(new URL('/api/health', board.url));
    assert.equal(health.status, 200);
    const { admin_token: token, url } = await client.kanbanAdminToken();
    assert.equal(url, board.url);
    assert.equal((await fetch(new URL('/api/boards', board.url), { headers: { authorization: `Bearer ${token}` } })).status, 200);
    assert.equal((await fetch(new URL('/api/boards', board.url))).status, 401, 'not without it');
  });

  test("a build runs on the manager's engine under the nodes' egress rules, is pushed to the cluster's registry, and its image runs on a worker", async () => {
    const { client } = await newTenant(t);
    // No image of its own: its first successful build deploys it.
    const s = await client.createService({ name: 'built', await_build: true });
    // While the manager's rules are not known to be in place (its label off), a build is refused
    // before any step runs. svcd's periodic pass puts the label back within 30 s: tried until one
    // build saw it off.
    const managerId = ((await lab.manager.engine.info()) as { Swarm: { NodeID: string } }).Swarm.NodeID;
    const setLabel = async (value: string | null) => {
      const n = (await lab.manager.engine.getNode(managerId).inspect()) as { Version: { Index: number }; Spec: Record<string, unknown> & { Labels?: Record<string, string> } };
      const labels = Object.fromEntries(Object.entries(n.Spec.Labels ?? {}).filter(([k]) => k !== 'svc.egress-rules'));
      await lab.manager.engine.getNode(managerId).update({ ...n.Spec, Labels: value === null ? labels : { ...labels, 'svc.egress-rules': value }, version: n.Version.Index });
    };
    let refused: string | null = null;
    for (let attempt = 0; attempt < 3 && refused === null; attempt++) {
      await setLabel(null);
      const early = await client.createBuild(s.id, { source_type: 'git', source_url: git.url('early') });
      const ended = await finishedBuild(client, s.id, early.build_id, 120_000);
      if (ended.status === 'failed' && /the build host is not ready for tenants' builds now/.test(ended.last_error ?? '')) refused = ended.last_error;
    }
    await setLabel('installed');
    assert.ok(refused, 'a build while the label was off was refused');
    const queued = await client.createBuild(s.id, { source_type: 'git', source_url: git.url('probes') });
    const build = await finishedBuild(client, s.id, queued.build_id, 240_000);
    const log = await client.buildLogs(s.id, build.id);
    assert.equal(build.status, 'succeeded', log.slice(-2000));
    // The same probe both ways: the port --egress-allow opens answers, the other does not, nor
    // the node's own engine.
    assert.match(log, /probe allowed: HTTP\/1\.[01] 200[\s\S]*?allowed control answered/, log.slice(-2000));
    assert.match(log, /probe closed: unreachable/);
    assert.match(log, /probe node: unreachable/);
    // Its image, from the cluster's registry, serves on a worker through the proxy.
    const host = new URL((await client.service(s.id)).url ?? assert.fail('no url')).host;
    await waitFor('the built page', async () => {
      const page = await viaProxy(proxyPort, host, '/index.html').catch(() => null);
      return page?.status === 200 && page.body.includes('built on the swarm') ? true : undefined;
    }, 120_000);
  });

  test("an environment runs pinned to its workspace's node, its agent published on a port of --swarm-ports (answering only with its token): exec, files, sync and previews reach it there; its workspace counts against the disk quota; stopped and started, its workspace is there; deleted, its port rests", async () => {
    const { client, id: tenantId } = await newTenant(t);
    await warmImages;
    const env = await client.createEnvironment({ name: 'dev', template_id: 'node' });
    assert.equal(env.status, 'running');
    const row = (await t.deps.store.environments.findAny(env.id)) ?? assert.fail('no record');
    const port = row.published_port ?? assert.fail('no published port');
    assert.ok(port >= 30_000 && port <= 32_767, String(port));
    const node = row.node ?? assert.fail('not placed on a node');
    // A Swarm service whose task runs on that node, pinned there, its agent's port published in host mode.
    const [service] = (await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${env.id}`] } })) as Array<{ ID: string; Spec: { TaskTemplate: { Placement?: { Constraints?: string[] } } } }>;
    assert.ok(service?.Spec.TaskTemplate.Placement?.Constraints?.includes(`node.id==${node}`), JSON.stringify(service?.Spec.TaskTemplate.Placement));
    const task = (await tasksOf(service?.ID ?? assert.fail('no Swarm service'))).find((x) => x.Status.State === 'running' && x.DesiredState === 'running') ?? assert.fail('no running task');
    assert.equal(task.NodeID, node);
    // (Listed once per address family the node binds it on.)
    assert.deepEqual([...new Set(task.Status.PortStatus?.Ports?.map((p) => `${p.PublishMode ?? ''} ${String(p.PublishedPort)} ${String(p.TargetPort)}`))], [`host ${String(port)} ${String(AGENT_PORT)}`]);
    const address = row.address ?? assert.fail('no address');
    assert.equal(address, ((await lab.manager.engine.getNode(node).inspect()) as { Status: { Addr: string } }).Status.Addr, "the node's address");

    // The agent at the node's port: nothing without the environment's token, the health check with it.
    const token = t.deps.sealer.open(row.agent_token ?? assert.fail('no agent token'));
    const health = (auth: string | null) => fetch(`http://${address}:${String(port)}/health`, { headers: auth ? { authorization: auth } : {} }).then((r) => r.status);
    assert.equal(await health(null), 401);
    assert.equal(await health('Bearer not-the-token'), 401);
    assert.equal(await health(`Bearer ${token}`), 200);

    // Commands, files and a sync through it (the sync's archive through the node's engine exec).
    const ran = await client.exec(env.id, { command: ['sh', '-c', 'echo kept > /workspace/kept.txt && cat /workspace/kept.txt'] });
    assert.deepEqual([ran.exit_code, ran.stdout], [0, 'kept\n']);
    await client.writeFile(env.id, '/workspace/written.txt', 'through the files API\n');
    assert.equal((await client.statFile(env.id, '/workspace/written.txt')).size, 'through the files API\n'.length);
    const synced = await client.sync(env.id, { git_url: httpsGit.url('project'), git_ref: 'v1' });
    assert.equal((await client.exec(env.id, { command: ['cat', `${synced.path}/README.md`] })).stdout, 'project v1\n');

    // A preview of a server that listens on the environment's loopback only: through the proxy
    // to the agent, which forwards it there.
    const server = "require('http').createServer((q, s) => s.end('preview page for ' + q.headers.host)).listen(8000, '127.0.0.1')";
    await client.exec(env.id, { command: ['sh', '-c', `(node -e "${server}" >/dev/null 2>&1 &)`] });
    const preview = await client.createPreview(env.id, { name: 'site', port: 8000 });
    const previewHost = new URL(preview.url ?? assert.fail('no preview url')).host;
    const page = await waitFor('the preview through the proxy', () => viaProxy(proxyPort, previewHost, '/').then((r) => (r.status === 200 ? r : undefined)), 30_000);
    assert.equal(page.body, `preview page for ${previewHost}`);
    // The same port asked for straight at the node, without the proxy's preview token: refused.
    const straight = await fetch(`http://${address}:${String(port)}/`, { headers: { 'x-svc-preview-port': '8000', authorization: `Bearer ${token}` } });
    assert.equal(straight.status, 401);

    // What it writes to its workspace, on a worker's disk (the lab's manager runs no task), counts
    // against the tenant's disk quota: each node's engine is asked.
    assert.notEqual(node, ((await lab.manager.engine.info()) as { Swarm: { NodeID: string } }).Swarm.NodeID, 'on a worker');
    await client.exec(env.id, { command: ['sh', '-c', 'head -c 33554432 /dev/zero > /workspace/fill'] });
    const measured = (await t.deps.diskMeter.pass()).get(tenantId) ?? 0;
    assert.ok(measured >= 32 * 1024 * 1024, `measured ${String(measured)} bytes`);

    // Stopped and started: a new task on the same node, the same port, the workspace kept.
    assert.equal((await client.stopEnvironment(env.id)).status, 'stopped');
    assert.equal((await waitFor('the preview to say stopped', () => viaProxy(proxyPort, previewHost, '/').then((r) => (r.status === 503 ? r : undefined)), 30_000)).status, 503);
    assert.equal((await client.startEnvironment(env.id)).status, 'running');
    const again = (await t.deps.store.environments.findAny(env.id)) ?? assert.fail();
    assert.deepEqual([again.node, again.published_port], [node, port]);
    assert.equal((await client.exec(env.id, { command: ['cat', '/workspace/kept.txt', '/workspace/written.txt'] })).stdout, 'kept\nthrough the files API\n');

    // Deleted: its Swarm service goes, and its port rests before it is given again.
    const before = Math.floor(Date.now() / 1000) - 1;
    await client.deleteEnvironment(env.id);
    await waitFor('its Swarm service to go', async () => ((await lab.manager.engine.listServices({ filters: { label: [`svc.resource=${env.id}`] } })).length === 0 ? true : undefined), 60_000);
    assert.ok((await t.deps.store.publishedPorts.taken(before)).includes(port), 'resting');
  });
});
