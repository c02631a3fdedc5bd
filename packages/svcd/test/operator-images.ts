// Local stand-ins for the public operator images postgres:16-alpine, redis:7-alpine and
// node:24-bookworm-slim (no registry is reachable here), built from Debian's packages: a debootstrap root file system imported through
// the Engine API, then PostgreSQL or Redis installed in one step run under runc and committed
// (buildWithRunc). They honour the public
// images' interface (DECISIONS.md): postgres takes POSTGRES_USER, POSTGRES_PASSWORD and
// POSTGRES_DB, keeps its data in PGDATA (/var/lib/postgresql/data), initialises an empty volume
// on first start, listens on 5432 and runs as the `postgres` user when asked to; redis is driven
// by redis-server arguments, keeps its data in /data, listens on 6379 and runs as `redis`; node
// has `node` on PATH (Debian's: version 18) and a `node` user with uid 1000, as the public
// node images do.
// Built once per machine and kept. Run directly: node --import tsx packages/svcd/test/operator-images.ts
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pack } from 'tar-stream';
import { docker, finished, imagePresent } from './images.js';

export const DEBIAN_BASE_IMAGE = 'svc-test/debian:bookworm';
export const POSTGRES_IMAGE = 'svc-test/postgres:15';
export const REDIS_IMAGE = 'svc-test/redis:7';
export const NODE_IMAGE = 'svc-test/node:18';
const MIRROR = 'http://deb.debian.org/debian';

// As the public image's docker-entrypoint.sh does, for the parts svc relies on.
const POSTGRES_ENTRYPOINT = `#!/bin/sh
set -eu
export PGDATA="\${PGDATA:-/var/lib/postgresql/data}"
BIN=/usr/lib/postgresql/15/bin
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" && chown -R postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s' "\${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > "$pw"
  "$BIN/initdb" -D "$PGDATA" -U "\${POSTGRES_USER:-postgres}" --pwfile="$pw" --auth-local=scram-sha-256 --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  db="\${POSTGRES_DB:-\${POSTGRES_USER:-postgres}}"
  if [ "$db" != postgres ]; then
    "$BIN/postgres" --single -D "$PGDATA" postgres <<SQL >/dev/null
CREATE DATABASE "$db";
SQL
  fi
fi
exec "$BIN/postgres" -D "$PGDATA" -k /tmp
`;

// As the public image's: options alone mean redis-server with them; as root, drop to `redis`.
const REDIS_ENTRYPOINT = `#!/bin/sh
set -e
case "$1" in -*) set -- redis-server "$@" ;; esac
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  chown -R redis:redis /data
  exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
`;

async function ensureDebianBase(): Promise<void> {
  if (await imagePresent(DEBIAN_BASE_IMAGE)) return;
  if (!existsSync('/usr/sbin/debootstrap')) throw new Error("debootstrap is missing: install Debian's debootstrap (make test does)");
  const root = mkdtempSync(join(tmpdir(), 'svc-debootstrap-'));
  try {
    process.stderr.write(`operator-images: debootstrap bookworm into ${root} (about a minute)\n`);
    execFileSync('debootstrap', ['--variant=minbase', 'bookworm', root, MIRROR], { stdio: ['ignore', 'ignore', 'inherit'] });
    // The root file system as a tar stream straight into the engine's image import.
    const tar = spawn('tar', ['-C', root, '-c', '.'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const stream = await docker.importImage(tar.stdout, { repo: DEBIAN_BASE_IMAGE.split(':')[0], tag: 'bookworm' });
    await finished(stream);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** The base's PATH, which an ENV of the commit's changes states in full (they expand no variables of the image's). */
const DEBIAN_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const APT_INSTALL = 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends';

/**
 * An image of the Debian base and one step (a shell script, after `files` are put in place), with
 * `changes` (Dockerfile instructions: ENV, ENTRYPOINT, CMD, VOLUME, EXPOSE, WORKDIR) on top: what
 * a Dockerfile of FROM, COPY and one RUN would make, but with the step run under runc and the
 * container committed. This engine's default runtime is gVisor, and the classic builder runs
 * RUN steps under it: apt-get there took 137 s against 29 s under runc (python3 and git,
 * 2026-11-27), and Debian's runsc answers coreutils' statx with EINVAL, which postgresql-common's
 * maintainer scripts trip over. These are the tests' own images of Debian's packages, as trusted
 * as the engine itself; tenants' builds still run under gVisor.
 */
async function buildWithRunc(tag: string, script: string, changes: string[], files: Record<string, { body: string; mode: number }> = {}): Promise<void> {
  await ensureDebianBase();
  process.stderr.write(`operator-images: building ${tag}\n`);
  const container = await docker.createContainer({ Image: DEBIAN_BASE_IMAGE, Cmd: ['sh', '-c', `set -e; ${script}`], HostConfig: { Runtime: 'runc' } });
  try {
    if (Object.keys(files).length > 0) {
      const archive = pack();
      for (const [path, f] of Object.entries(files)) archive.entry({ name: path.replace(/^\//, ''), mode: f.mode }, f.body);
      archive.finalize();
      await container.putArchive(archive as unknown as NodeJS.ReadableStream, { path: '/' });
    }
    await container.start();
    const { StatusCode } = (await container.wait()) as { StatusCode: number };
    if (StatusCode !== 0) {
      const log = (await container.logs({ stdout: true, stderr: true, tail: 20 })).toString('utf8');
      throw new Error(`operator-images: building ${tag} exited with ${String(StatusCode)}: ${log}`);
    }
    const [repo = '', version = ''] = tag.split(':');
    // The step's command does not stay: every image states its CMD, or an ENTRYPOINT (which
    // clears CMD). The PATH a Dockerfile build gives an image of an imported root file system.
    // dockerode's typings take no fields here; the engine reads each `changes` entry as a line.
    const options: Record<string, unknown> = { repo, tag: version, changes: [`ENV PATH=${DEBIAN_PATH}`, ...changes] };
    await container.commit(options);
  } finally {
    await container.remove({ force: true });
  }
}

/** The Node base image of the task board. */
export async function ensureNodeImage(): Promise<void> {
  if (await imagePresent(NODE_IMAGE)) return;
  await buildWithRunc(NODE_IMAGE, `${APT_INSTALL} nodejs && rm -rf /var/lib/apt/lists/* && groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node`, ['CMD ["node"]']);
}

/** Stand-ins for the environment templates' images (ubuntu:24.04, node, python, golang). */
export const TEMPLATE_IMAGES = {
  default: 'svc-test/env-default:1',
  node: 'svc-test/env-node:1',
  python: 'svc-test/env-python:1',
  go: 'svc-test/env-go:1',
} as const;
// Like the public images: the language and git (buildpack-deps has it); the Ubuntu base has neither.
const TEMPLATE_PACKAGES: Record<keyof typeof TEMPLATE_IMAGES, string[]> = {
  default: [],
  node: ['nodejs', 'git'],
  python: ['python3', 'git'],
  go: ['golang-go', 'git'],
};

/** Builds the template stand-ins asked for (all by default) that are missing. */
export async function ensureTemplateImages(ids: Array<keyof typeof TEMPLATE_IMAGES> = ['default', 'node', 'python', 'go']): Promise<void> {
  for (const id of ids) {
    if (await imagePresent(TEMPLATE_IMAGES[id])) continue;
    const packages = TEMPLATE_PACKAGES[id];
    await buildWithRunc(
      TEMPLATE_IMAGES[id],
      packages.length ? `${APT_INSTALL} ${packages.join(' ')} ca-certificates && rm -rf /var/lib/apt/lists/*` : 'true',
      [...(id === 'go' ? [`ENV PATH=/usr/lib/go/bin:${DEBIAN_PATH}`] : []), 'CMD ["bash"]'],
    );
  }
}

/** Builds whichever of the database stand-in images is missing. */
export async function ensureDbImages(): Promise<void> {
  if (!(await imagePresent(POSTGRES_IMAGE))) {
    await buildWithRunc(
      POSTGRES_IMAGE,
      `${APT_INSTALL} postgresql-15 && rm -rf /var/lib/apt/lists/* /var/lib/postgresql/15 && mkdir -p /var/lib/postgresql/data && chown -R postgres:postgres /var/lib/postgresql && chmod 700 /var/lib/postgresql/data`,
      ['ENV PGDATA=/var/lib/postgresql/data', 'VOLUME /var/lib/postgresql/data', 'EXPOSE 5432', 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]'],
      { '/usr/local/bin/docker-entrypoint.sh': { body: POSTGRES_ENTRYPOINT, mode: 0o755 } },
    );
  }
  if (!(await imagePresent(REDIS_IMAGE))) {
    await buildWithRunc(
      REDIS_IMAGE,
      `${APT_INSTALL} redis-server && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data`,
      ['WORKDIR /data', 'VOLUME /data', 'EXPOSE 6379', 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]', 'CMD ["redis-server"]'],
      { '/usr/local/bin/docker-entrypoint.sh': { body: REDIS_ENTRYPOINT, mode: 0o755 } },
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await ensureDbImages();
  await ensureNodeImage();
  await ensureTemplateImages();
  process.stderr.write('operator-images: the database, board and template stand-ins are ready\n');
}
