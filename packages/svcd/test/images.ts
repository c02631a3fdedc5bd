// Images the tests build themselves (no registry is reachable): FROM scratch plus Debian's
// static busybox, through the Engine API. The busybox image serves HTTP on $PORT with CGI
// scripts that show the environment, crash the container on request, and fetch another address
// (for the network isolation tests). Where every request counts, the responder image serves
// instead: this machine's Caddy answering `respond` (RESPONDER_IMAGE).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { pack } from 'tar-stream';
import { dockerOptions } from '../src/runtime/docker/docker-runtime.js';
import { DEFAULT_TENANT_CPU_WEIGHT, TenantCgroups } from '../src/runtime/index.js';
import { ensureLoopbackRegistry, inRegistry, LOOPBACK_REGISTRY } from '../../../examples/loopback-registry.js';
import { DOCKER_HOST, freePort, newTenant, type TestServer } from './harness.js';

/**
 * The tests' images live in the loopback registry (examples/loopback-registry.ts, Debian's
 * docker-registry), started once per machine and kept: every deploy pulls its image (a tenant
 * runs only images it could pull itself), so the images services run are served from there, as a
 * tenant's would be from Docker Hub.
 */
export const TEST_REGISTRY = LOOPBACK_REGISTRY;

export const BUSYBOX_IMAGE = `${TEST_REGISTRY}/svc-test/busybox-httpd:5`;
/** A WebSocket server on $PORT (busybox nc + sh): the handshake, then one frame each way (it waits for the client's). */
export const WEBSOCKET_IMAGE = `${TEST_REGISTRY}/svc-test/websocket:3`;
/** Serves on $PORT and keeps one core busy for its first 60 seconds (metering tests). */
export const BURNER_IMAGE = `${TEST_REGISTRY}/svc-test/burner:1`;
/** Serves on $PORT and prints long lines to stdout without pause (log floods). */
export const CHATTER_IMAGE = `${TEST_REGISTRY}/svc-test/chatter:1`;
/** Same contents, never listens: deploys that cannot become ready. */
export const SLEEPER_IMAGE = `${TEST_REGISTRY}/svc-test/sleeper:1`;
/** Prints a line and exits with code 7 at once: deploys whose container exits. */
export const EXITER_IMAGE = `${TEST_REGISTRY}/svc-test/exiter:1`;
const BUSYBOX = '/bin/busybox';

const START = `#!/bin/sh
# PID 1: serve, and exit with code 3 once /tmp/crash appears (the crash CGI creates it).
echo "svc-test starting on port \${PORT:-8000}"
httpd -f -v -p \${PORT:-8000} -h /www &
while [ ! -f /tmp/crash ]; do sleep 0.1; done
echo "svc-test crashing on request"
exit 3
`;

// One WebSocket connection (RFC 6455) on stdin/stdout: answer the handshake with the right
// Sec-WebSocket-Accept, send the text frame "hello", read the client's first frame (masked: 2
// header bytes, 4 mask bytes and a 5-byte payload) and answer "got 11 bytes", which shows that
// bytes flow both ways through whatever sits in between.
const WEBSOCKET = `#!/bin/sh
cr=$(printf '\\r')
key=
while IFS= read -r line; do
  line=\${line%$cr}
  [ -z "$line" ] && break
  case "$line" in [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(echo "\${line#*:}" | tr -d ' ');; esac
done
accept=$(printf '%s' "\${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -c1-40 | xxd -r -p | base64)
printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: %s\\r\\n\\r\\n' "$accept"
printf '\\201\\005hello'
# nc hands over a non-blocking socket: dd reads what has arrived and returns, so it is asked
# again (every 20 ms, for up to five minutes) until the client's 11-byte frame is in.
n=0
tries=0
while [ "$n" -lt 11 ] && [ "$tries" -lt 15000 ]; do
  n=$((n + $(dd bs=1 count=$((11 - n)) 2>/dev/null | wc -c)))
  tries=$((tries + 1))
  [ "$n" -lt 11 ] && usleep 20000
done
printf '\\201\\014got %s bytes' "$n"
`;

// CRLF after the CGI header: busybox passes it through, and Node's HTTP parser insists on it.
const CGI = (body: string) => `#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
${body}
`;

/**
 * Answers every request with "hello from svc-test" and logs it (its access log, on stderr): Caddy's
 * `respond`, a Go server. Where every request must be answered (a rolling redeploy under load):
 * busybox httpd, one process per connection, closes some connections without an answer (about
 * one in a thousand on an idle machine, a few in a hundred with both cores busy; measured against
 * the container's own address on one engine, with nothing of svc in the path).
 */
export const RESPONDER_IMAGE = `${TEST_REGISTRY}/svc-test/responder:1`;
export const RESPONDER_BODY = 'hello from svc-test';
export const docker = new Docker(dockerOptions(DOCKER_HOST, 120_000));

export async function buildImage(tag: string, files: Record<string, { body: string | Buffer; mode?: number }>): Promise<void> {
  const tar = pack();
  for (const [name, f] of Object.entries(files)) tar.entry({ name, mode: f.mode ?? 0o644 }, f.body);
  tar.finalize();
  await finished(await docker.buildImage(tar as unknown as NodeJS.ReadableStream, { t: tag, forcerm: true }));
}

/** Waits for an engine progress stream (build, push, import) to end; rejects with the engine's error. */
export function finished(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = out.find((o) => o.error);
      if (err || failed) reject(err ?? new Error(failed?.error));
      else resolve();
    }),
  );
}

export async function imagePresent(tag: string): Promise<boolean> {
  try {
    await docker.getImage(tag).inspect();
    return true;
  } catch {
    return false;
  }
}

/** Starts the tests' registry unless it answers already; it outlives the test process. */
export function ensureTestRegistry(): Promise<void> {
  return ensureLoopbackRegistry((line) => process.stderr.write(`tests: ${line}\n`));
}

const CADDY = '/usr/bin/caddy';

/**
 * An image of this machine's Caddy (ensure-caddy.sh) running `caddy respond ARGS` on port 8000:
 * FROM scratch with the binary and the shared libraries it loads.
 */
export function caddyRespondImageFiles(args: string[]): ImageFiles {
  if (!existsSync(CADDY)) throw new Error(`${CADDY} is missing: scripts/ensure-caddy.sh installs Debian's caddy (make test does)`);
  // A static build has no libraries to copy (ldd then exits non-zero).
  let linked = '';
  try {
    linked = execFileSync('ldd', [CADDY], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    linked = '';
  }
  if (/not found/.test(linked)) throw new Error(`${CADDY} lacks a shared library: ${linked}`);
  const libs = linked
    .split('\n')
    .map((l) => /(\/\S+)\s+\(0x/.exec(l)?.[1])
    .filter((p): p is string => !!p);
  const files: ImageFiles = { caddy: { body: readFileSync(CADDY), mode: 0o755 } };
  const copies = ['COPY caddy /caddy'];
  for (const [i, lib] of libs.entries()) {
    files[`lib${String(i)}`] = { body: readFileSync(lib), mode: 0o755 }; // the loader must be executable
    copies.push(`COPY lib${String(i)} ${lib}`);
  }
  const cmd = JSON.stringify(['/caddy', 'respond', ...args]);
  return { ...files, Dockerfile: { body: ['FROM scratch', ...copies, 'ENV HOME=/ XDG_DATA_HOME=/ XDG_CONFIG_HOME=/', 'EXPOSE 8000', `CMD ${cmd}`].join('\n') } };
}

/** Builds the test images once per machine (they are kept between runs) and serves them from the test registry. */
export async function ensureTestImages(): Promise<void> {
  await ensureTestRegistry();
  await buildTestImages();
  for (const image of [BUSYBOX_IMAGE, WEBSOCKET_IMAGE, BURNER_IMAGE, SLEEPER_IMAGE, CHATTER_IMAGE, EXITER_IMAGE, RESPONDER_IMAGE]) {
    if (!(await inRegistry(image))) await finished(await docker.getImage(image).push({ authconfig: {} }));
  }
}

async function buildTestImages(): Promise<void> {
  if (!existsSync(BUSYBOX)) throw new Error(`${BUSYBOX} is missing: install Debian's busybox-static (make test does)`);
  const busybox = { body: readFileSync(BUSYBOX), mode: 0o755 };
  if (!(await imagePresent(BUSYBOX_IMAGE))) {
    await buildImage(BUSYBOX_IMAGE, {
      Dockerfile: {
        body: [
          'FROM scratch',
          'COPY busybox /bin/busybox',
          'RUN ["/bin/busybox", "--install", "-s", "/bin"]',
          'COPY start.sh /start.sh',
          'COPY www /www',
          'ENV PATH=/bin',
          'EXPOSE 8000',
          'CMD ["/bin/sh", "/start.sh"]',
        ].join('\n'),
      },
      busybox,
      'start.sh': { body: START, mode: 0o755 },
      'www/index.html': { body: 'hello from svc-test\n' },
      'www/cgi-bin/env': { body: CGI('env | sort'), mode: 0o755 },
      // /cgi-bin/log?TEXT -> TEXT on the container's stdout (PID 1's), for log tests.
      'www/cgi-bin/log': { body: CGI('echo "log: $QUERY_STRING" > /proc/1/fd/1; echo logged'), mode: 0o755 },
      // /cgi-bin/stream -> four lines, 300 ms apart (streamed responses through the proxy).
      'www/cgi-bin/stream': { body: CGI('for i in 1 2 3 4; do echo "line $i"; sleep 0.3; done'), mode: 0o755 },
      'www/cgi-bin/crash': { body: CGI('touch /tmp/crash; echo crashing'), mode: 0o755 },
      // /cgi-bin/fetch?HOST:PORT -> what that address answers, or "unreachable". (nc, not wget:
      // the static busybox's wget crashes resolving even an IP literal in a FROM scratch image.)
      'www/cgi-bin/fetch': {
        body: CGI(
          [
            'out=$(printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 2 "${QUERY_STRING%:*}" "${QUERY_STRING##*:}" 2>/dev/null)',
            'if [ -n "$out" ]; then echo "$out"; else echo unreachable; fi',
          ].join('\n'),
        ),
        mode: 0o755,
      },
    });
  }
  if (!(await imagePresent(WEBSOCKET_IMAGE))) {
    await buildImage(WEBSOCKET_IMAGE, {
      Dockerfile: {
        body: [
          'FROM scratch',
          'COPY busybox /bin/busybox',
          'RUN ["/bin/busybox", "--install", "-s", "/bin"]',
          'COPY websocket.sh /websocket.sh',
          'ENV PATH=/bin',
          // -ll: keep listening, one websocket.sh per connection.
          'CMD ["/bin/sh", "-c", "exec nc -ll -p ${PORT:-8000} -e /websocket.sh"]',
        ].join('\n'),
      },
      busybox,
      'websocket.sh': { body: WEBSOCKET, mode: 0o755 },
    });
  }
  if (!(await imagePresent(RESPONDER_IMAGE))) await buildImage(RESPONDER_IMAGE, caddyRespondImageFiles(['--listen', ':8000', '--access-log', RESPONDER_BODY]));
  if (!(await imagePresent(BURNER_IMAGE))) await buildImage(BURNER_IMAGE, httpdImageFiles({ index: 'burning\n', work: "timeout 60 sh -c 'while :; do :; done'; wait" }));
  // 1 KB lines as fast as the engine takes them.
  if (!(await imagePresent(CHATTER_IMAGE))) await buildImage(CHATTER_IMAGE, httpdImageFiles({ index: 'chatting\n', work: "yes $(printf '%01000d' 0)" }));
  if (!(await imagePresent(SLEEPER_IMAGE))) {
    await buildImage(SLEEPER_IMAGE, {
      Dockerfile: { body: ['FROM scratch', 'COPY busybox /bin/busybox', 'CMD ["/bin/busybox", "sleep", "3600"]'].join('\n') },
      busybox,
    });
  }
  if (!(await imagePresent(EXITER_IMAGE))) {
    await buildImage(EXITER_IMAGE, {
      Dockerfile: { body: ['FROM scratch', 'COPY busybox /bin/busybox', 'CMD ["/bin/busybox", "sh", "-c", "echo giving up; exit 7"]'].join('\n') },
      busybox,
    });
  }
}

type ImageFiles = Record<string, { body: string | Buffer; mode?: number }>;

/**
 * An image of Debian's static busybox serving /www over HTTP on $PORT (readiness), with `work`
 * running beside it when given (else httpd is PID 1), and any further files.
 */
export function httpdImageFiles(o: { index: string; work?: string; files?: ImageFiles }): ImageFiles {
  const serve = 'httpd -f -p ${PORT:-8000} -h /www';
  return {
    Dockerfile: {
      body: [
        'FROM scratch',
        'COPY busybox /bin/busybox',
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]',
        'COPY www /www',
        'ENV PATH=/bin',
        'EXPOSE 8000',
        `CMD ["/bin/sh", "-c", "${o.work === undefined ? `exec ${serve}` : `${serve} & ${o.work}`}"]`,
      ].join('\n'),
    },
    busybox: { body: readFileSync(BUSYBOX), mode: 0o755 },
    'www/index.html': { body: o.index },
    ...o.files,
  };
}

/** Removes every image matching a reference pattern (svc/<tenant>/*, a repository, ...). */
export async function removeImages(reference: string): Promise<void> {
  for (const img of await docker.listImages({ filters: { reference: [reference] } })) await docker.getImage(img.Id).remove({ force: true }).catch(() => {});
}

/** Removes every workload, volume and network the engine holds for the tenants of a test store. */
/**
 * The tenants a suite registers on a real engine, so that `cleanup` removes what they left
 * (containers, volumes, networks). `add` registers one on the server `server()` returns.
 */
export function engineTenants(server: () => TestServer) {
  const ids: string[] = [];
  return {
    ids,
    async add(on: TestServer = server()) {
      const a = await newTenant(on);
      ids.push(a.id);
      return a;
    },
    cleanup: () => removeTenantWorkloads(ids),
  };
}

export async function removeTenantWorkloads(tenantIds: string[]): Promise<void> {
  for (const id of tenantIds) {
    const list = await docker.listContainers({ all: true, filters: { label: [`svc.tenant=${id}`] } });
    for (const c of list) await docker.getContainer(c.Id).remove({ force: true, v: true }).catch(() => {});
    // The engine answers null rather than [] when there are none (dockerode's types say an array).
    const listed: { Volumes: Array<{ Name: string }> | null } = await docker.listVolumes({ filters: { label: [`svc.tenant=${id}`] } });
    for (const v of listed.Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => {});
    await docker.getNetwork(`tenant-${id}`).remove().catch(() => {});
    // The engine leaves the tenant's (now empty) CPU group behind; svc removes it, so does this.
    await tenantCgroups.releaseTenant(id).catch(() => {});
  }
}

const tenantCgroups = new TenantCgroups(DEFAULT_TENANT_CPU_WEIGHT);

/** A loopback registry (Debian's docker-registry) on a free port, for the tests that pull. */
export async function startRegistry(): Promise<{ host: string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-registry-'));
  const port = await freePort();
  const config = join(dir, 'config.yml');
  writeFileSync(config, [
    'version: 0.1',
    'log: { level: error }',
    `storage: { filesystem: { rootdirectory: ${join(dir, 'data')} }, delete: { enabled: true } }`,
    `http: { addr: 127.0.0.1:${port} }`,
  ].join('\n'));
  const proc = spawn('docker-registry', ['serve', config], { stdio: 'ignore' });
  const host = `127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    if (await fetch(`http://${host}/v2/`).then((r) => r.ok, () => false)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    host,
    stop: async () => {
      proc.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Tags a local image into the registry and pushes it through the Engine API. */
export async function pushToRegistry(image: string, target: string): Promise<void> {
  const [repo, tag] = [target.slice(0, target.lastIndexOf(':')), target.slice(target.lastIndexOf(':') + 1)];
  await docker.getImage(image).tag({ repo, tag });
  await finished(await docker.getImage(target).push({ authconfig: {} }));
}
