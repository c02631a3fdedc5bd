// The task board's image: svcd builds it locally, on first need, from the @svc/kanban package of
// this repository on the operator's Node base image (--kanban-image), so no registry is
// involved. The tag is a hash of the base image and the files, so a new svcd with a changed
// board builds a new image, and an unchanged one reuses what the engine has. On a swarm it is
// built on the manager's engine and pushed to the cluster's registry (--build-registry), which
// the node that runs a board pulls it from.
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Logger } from 'pino';
import type { Runtime } from '../runtime/index.js';

/** A build or push of the board image that takes longer has hung (the engine, the registry): it fails, and the next start tries again. */
const IMAGE_STEP_TIMEOUT_MS = 10 * 60_000;
/** Where the board listens inside its container, and where its data lives. */
export const KANBAN_PORT = 8080;
export const KANBAN_DATA_DIR = '/data';
const BUILD_LIMITS = { memoryMb: 512, cpus: 1, pids: 512 };

/** The board package's files the image needs: what `npm pack` would ship, plus its one dependency. */
function boardFiles(): Array<{ from: string; to: string }> {
  const require = createRequire(import.meta.url);
  const pkgDir = dirname(require.resolve('@svc/kanban/package.json'));
  const sqliteDir = dirname(createRequire(join(pkgDir, 'package.json')).resolve('node-sqlite3-wasm/package.json'));
  const files: Array<{ from: string; to: string }> = [{ from: join(pkgDir, 'package.json'), to: 'package.json' }];
  const walk = (dir: string, to: string, keep: (name: string) => boolean) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path, join(to, name), keep);
      else if (keep(name)) files.push({ from: path, to: join(to, name) });
    }
  };
  walk(join(pkgDir, 'dist'), 'dist', (name) => name.endsWith('.js'));
  walk(join(pkgDir, 'public'), 'public', () => true);
  walk(sqliteDir, 'node_modules/node-sqlite3-wasm', (name) => name === 'package.json' || name.endsWith('.js') || name.endsWith('.wasm'));
  return files;
}

function dockerfile(baseImage: string): string {
  return [
    `FROM ${baseImage}`,
    'COPY app /app',
    // The public node images have a `node` user; the board runs as it, and a fresh volume takes
    // the ownership of this directory, so the board can write its file with no capabilities.
    `RUN mkdir -p ${KANBAN_DATA_DIR} && chown node:node ${KANBAN_DATA_DIR}`,
    'USER node',
    `ENV NODE_ENV=production KANBAN_DATA_DIR=${KANBAN_DATA_DIR} PORT=${KANBAN_PORT}`,
    `VOLUME ${KANBAN_DATA_DIR}`,
    `EXPOSE ${KANBAN_PORT}`,
    'WORKDIR /app',
    'CMD ["node", "/app/dist/server.js"]',
    '',
  ].join('\n');
}

export class KanbanImage {
  private readonly builds = new Map<string, Promise<string>>();
  /** Pushes under way, by reference. */
  private readonly pushes = new Map<string, Promise<string>>();
  /** The files and their tag: read and hashed once, as they do not change while svcd runs. */
  private content: { files: Array<{ from: string; to: string }>; tag: string } | null = null;

  constructor(
    private readonly runtime: Runtime,
    private readonly baseImage: string,
    /** Scratch space for the build context. */
    private readonly workDir: string,
    private readonly log: Logger,
    /** The registry the image is pushed to, for nodes to pull (a swarm); null: it stays on the engine. */
    private readonly registry: string | null = null,
  ) {}

  /** The image's tag, built first when the engine does not have it. One build at a time per tag. */
  async ensure(): Promise<string> {
    if (!this.content) {
      const files = boardFiles();
      this.content = { files, tag: this.tagFor(files) };
    }
    const { files, tag } = this.content;
    const built = (await this.runtime.hasImage(tag)) ? tag : await this.buildOnce(tag, files);
    return this.registry === null ? built : this.pushToRegistry(built);
  }

  private buildOnce(tag: string, files: Array<{ from: string; to: string }>): Promise<string> {
    let pending = this.builds.get(tag);
    if (!pending) {
      pending = this.build(tag, files).finally(() => this.builds.delete(tag));
      this.builds.set(tag, pending);
    }
    return pending;
  }

  /**
   * Pushes the image to the registry at each need (a board's start), one push at a time: the
   * registry may have lost it since, and a push of layers it has is quick.
   */
  private pushToRegistry(tag: string): Promise<string> {
    let pending = this.pushes.get(tag);
    if (!pending) {
      pending = this.runtime
        .pushImage(tag, AbortSignal.timeout(IMAGE_STEP_TIMEOUT_MS), () => {})
        .then(
          () => tag,
          (err: unknown) => {
            throw new Error(`pushing the board image to ${this.registry ?? ''} failed: ${(err as Error).message}`);
          },
        )
        .finally(() => this.pushes.delete(tag));
      this.pushes.set(tag, pending);
    }
    return pending;
  }

  private tagFor(files: Array<{ from: string; to: string }>): string {
    const hash = createHash('sha256').update(dockerfile(this.baseImage));
    for (const f of files) hash.update(`\0${f.to}\0`).update(readFileSync(f.from));
    const name = `svc/kanban:${hash.digest('hex').slice(0, 16)}`;
    return this.registry === null ? name : `${this.registry}/${name}`;
  }

  private async build(tag: string, files: Array<{ from: string; to: string }>): Promise<string> {
    if (!(await this.runtime.hasImage(this.baseImage))) await this.runtime.pullImage(this.baseImage);
    mkdirSync(this.workDir, { recursive: true });
    const context = mkdtempSync(join(this.workDir, 'kanban-'));
    try {
      for (const f of files) {
        mkdirSync(dirname(join(context, 'app', f.to)), { recursive: true });
        cpSync(f.from, join(context, 'app', f.to));
      }
      writeFileSync(join(context, 'Dockerfile'), dockerfile(this.baseImage));
      this.log.info({ tag, base: this.baseImage, files: files.length }, 'building the task board image');
      const output: string[] = [];
      await this.runtime
        .buildImage({
          contextDir: context,
          tag,
          tenantId: null,
          resourceId: 'kanban',
          limits: BUILD_LIMITS,
          // The operator's base image, pulled once above if missing: no pull per build.
          pullBaseImages: false,
          signal: AbortSignal.timeout(IMAGE_STEP_TIMEOUT_MS),
          onOutput: (line) => output.push(line),
        })
        .catch((err: unknown) => {
          throw new Error(`building the board image on ${this.baseImage} failed: ${(err as Error).message} (${output.slice(-3).join(' | ')})`);
        });
      return tag;
    } finally {
      rmSync(context, { recursive: true, force: true });
    }
  }
}
