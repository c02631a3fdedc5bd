// Local stand-ins for the public operator images postgres:16-alpine, redis:7-alpine and
// node:24-bookworm-slim (no registry is reachable here), built from Debian's packages: a debootstrap root file system imported through
// the Engine API, then PostgreSQL or Redis installed in a Dockerfile step. They honour the public
// images' interface (DECISIONS.md): postgres takes POSTGRES_USER, POSTGRES_PASSWORD and
// POSTGRES_DB, keeps its data in PGDATA (/var/lib/postgresql/data), initialises an empty volume
// on first start, listens on 5432 and runs as the `postgres` user when asked to; redis is driven
// by redis-server arguments, keeps its data in /data, listens on 6379 and runs as `redis`; node
// has `node` on PATH (Debian's: version 18) and a `node` user with uid 1000, as the public
// node images do.
// Built once per machine and kept. Run directly: node --import tsx packages/svcd/test/operator-images.ts
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildImage, docker, finished, imagePresent } from './images.js';

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

const APT_INSTALL = 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends';

/**
 * A RUN step's command with busybox's `ls` and `stat` in place of coreutils' for its length. The
 * builder runs RUN steps under gVisor, and Debian's runsc (2022-12) answers statx with
 * AT_NO_AUTOMOUNT, which coreutils 9's `ls` and `stat` always pass, with EINVAL (README,
 * Environments); postgresql-common's maintainer scripts call both and its install fails.
 * busybox's use lstat. Diverted with dpkg, so that the packages' own files are put back after.
 */
function withBusyboxLsAndStat(command: string): string[] {
  const tools = ['/bin/ls', '/usr/bin/stat'];
  return [
    'COPY busybox /usr/local/bin/busybox',
    `RUN for f in ${tools.join(' ')}; do dpkg-divert --quiet --local --rename --add $f && ln -s /usr/local/bin/busybox $f; done \\
 && ${command} \\
 && for f in ${tools.join(' ')}; do rm $f && dpkg-divert --quiet --local --rename --remove $f; done \\
 && rm /usr/local/bin/busybox`,
  ];
}

/** The Node base image of the task board. */
export async function ensureNodeImage(): Promise<void> {
  if (await imagePresent(NODE_IMAGE)) return;
  await ensureDebianBase();
  process.stderr.write('operator-images: building the node stand-in\n');
  await buildImage(NODE_IMAGE, {
    Dockerfile: {
      body: [
        `FROM ${DEBIAN_BASE_IMAGE}`,
        `RUN ${APT_INSTALL} nodejs && rm -rf /var/lib/apt/lists/*`,
        'RUN groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
        'CMD ["node"]',
      ].join('\n'),
    },
  });
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
    await ensureDebianBase();
    process.stderr.write(`operator-images: building the ${id} environment template stand-in\n`);
    const packages = TEMPLATE_PACKAGES[id];
    await buildImage(TEMPLATE_IMAGES[id], {
      Dockerfile: {
        body: [
          `FROM ${DEBIAN_BASE_IMAGE}`,
          ...(packages.length ? [`RUN ${APT_INSTALL} ${packages.join(' ')} ca-certificates && rm -rf /var/lib/apt/lists/*`] : []),
          ...(id === 'go' ? ['ENV PATH=/usr/lib/go/bin:$PATH'] : []),
          'CMD ["bash"]',
        ].join('\n'),
      },
    });
  }
}

/** Builds whichever of the database stand-in images is missing. */
export async function ensureDbImages(): Promise<void> {
  if ((await imagePresent(POSTGRES_IMAGE)) && (await imagePresent(REDIS_IMAGE))) return;
  await ensureDebianBase();
  if (!(await imagePresent(POSTGRES_IMAGE))) {
    process.stderr.write('operator-images: building the postgres stand-in\n');
    await buildImage(POSTGRES_IMAGE, {
      Dockerfile: {
        body: [
          `FROM ${DEBIAN_BASE_IMAGE}`,
          ...withBusyboxLsAndStat(`${APT_INSTALL} postgresql-15 && rm -rf /var/lib/apt/lists/* /var/lib/postgresql/15`),
          'RUN mkdir -p /var/lib/postgresql/data && chown -R postgres:postgres /var/lib/postgresql && chmod 700 /var/lib/postgresql/data',
          'ENV PGDATA=/var/lib/postgresql/data',
          'COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh',
          'VOLUME /var/lib/postgresql/data',
          'EXPOSE 5432',
          'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]',
        ].join('\n'),
      },
      'docker-entrypoint.sh': { body: POSTGRES_ENTRYPOINT, mode: 0o755 },
      busybox: { body: readFileSync('/bin/busybox'), mode: 0o755 },
    });
  }
  if (!(await imagePresent(REDIS_IMAGE))) {
    process.stderr.write('operator-images: building the redis stand-in\n');
    await buildImage(REDIS_IMAGE, {
      Dockerfile: {
        body: [
          `FROM ${DEBIAN_BASE_IMAGE}`,
          ...withBusyboxLsAndStat(`${APT_INSTALL} redis-server && rm -rf /var/lib/apt/lists/*`),
          'RUN mkdir -p /data && chown redis:redis /data',
          'WORKDIR /data',
          'VOLUME /data',
          'EXPOSE 6379',
          'COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh',
          'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]',
          'CMD ["redis-server"]',
        ].join('\n'),
      },
      'docker-entrypoint.sh': { body: REDIS_ENTRYPOINT, mode: 0o755 },
      busybox: { body: readFileSync('/bin/busybox'), mode: 0o755 },
    });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await ensureDbImages();
  await ensureNodeImage();
  await ensureTemplateImages();
  process.stderr.write('operator-images: the database, board and template stand-ins are ready\n');
}
