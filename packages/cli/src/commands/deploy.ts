// `svc deploy [DIR]`: the directory you stand in, built and running, in one command. Creates the
// service when the tenant has none of that name (it waits for its first build), packs the
// directory (source-archive.ts), uploads it, builds it from its Dockerfile, follows the build and
// the deploy, and prints the URL. The exit code is the outcome's.
import { lstatSync, type Stats } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { setImmediate as nextLoopTurn } from 'node:timers/promises';
import type { Command } from 'commander';
import { SOURCE_ARCHIVE_MAX_BYTES, SOURCE_UNPACKED_MAX_BYTES, type CreateBuildResponse, type SvcClient } from '@svc/client';
import type { Cli } from '../context.js';
import { action, CommandFailed, integer, keyValues } from '../output.js';
import { PackError, packDirectory } from '../source-archive.js';
import { followBuild } from './builds.js';
import { serviceNamed, settled } from './services.js';

const MB = 1024 ** 2;

/** A service name from a directory's: svc's names allow letters, digits, space, `.`, `_` and `-`. */
export function serviceNameFor(dirName: string): string {
  const name = dirName.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|[-.]+$/g, '').slice(0, 63);
  return name === '' ? 'app' : name;
}

/** A path's own details (a symlink's, not its target's), or null when it cannot be read. */
function statOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/**
 * The archive uploaded and its build queued, in one request (?build=true: a round trip less); an
 * svcd from before it answers the upload alone, and the build is then asked for on its own.
 */
export async function uploadAndBuild(c: SvcClient, serviceId: string, archive: Uint8Array<ArrayBuffer>): Promise<CreateBuildResponse> {
  const upload = await c.uploadSource(serviceId, archive, { build: true });
  return upload.build ?? c.createBuild(serviceId, { source_type: 'archive', source_id: upload.id });
}

interface DeployOptions {
  name?: string;
  port?: number;
  env?: string[];
  wait: boolean;
}

export function deployCommand(program: Command, { out, client }: Cli): void {
  program
    .command('deploy [dir]')
    .description('build a directory (a Dockerfile at its root) on svc and run it: the service of that name is created when there is none')
    .option('--name <name>', "the service's name (default: the directory's name)")
    .option('--port <port>', 'for a new service: the port the app listens on (default 8000)', integer)
    .option('--env <KEY=VALUE...>', 'for a new service: environment variables')
    .option('--no-wait', 'return once the build is queued, without following it')
    .action(
      action(out, async (dirArg: string | undefined, o: DeployOptions) => {
        const dir = resolve(dirArg ?? '.');
        // Synchronous, as the pack: the first asynchronous file call would start libuv's thread
        // pool, which nothing else of the command needs.
        const info = statOrNull(dir);
        if (!info?.isDirectory()) throw new CommandFailed(`${dir} is not a directory`, 2);
        const dockerfile = statOrNull(join(dir, 'Dockerfile'));
        if (!dockerfile) throw new CommandFailed(`no Dockerfile in ${dir}: svc builds the directory with it`, 2);
        if (!dockerfile.isFile()) throw new CommandFailed(`${join(dir, 'Dockerfile')} must be a regular file (svc does not follow a symlink there)`, 2);
        const name = o.name ?? serviceNameFor(basename(dir));
        const c = client();

        // The service is looked for while the directory is packed (a read: it changes nothing);
        // created only once packed: a directory that cannot be sent leaves no service behind.
        // The pack holds the event loop: a turn of it first, in which the lookup's connection is
        // made and its request sent, so that svcd answers it meanwhile (without the turn it was
        // sent once the pack ended).
        const existing = serviceNamed(c, name);
        existing.catch(() => {}); // awaited below, after the pack; its error is reported then
        await nextLoopTurn();
        let packed;
        try {
          packed = packDirectory(dir, SOURCE_ARCHIVE_MAX_BYTES, SOURCE_UNPACKED_MAX_BYTES);
        } catch (err) {
          throw err instanceof PackError ? new CommandFailed(err.message) : err;
        }
        const ignoring = packed.ignoreFile ? `, without what ${packed.ignoreFile} leaves out` : '';
        out.note(`packed ${packed.files} files, ${(packed.bytes / MB).toFixed(1)} MB (${(packed.archive.length / MB).toFixed(1)} MB compressed)${ignoring}`);
        for (const skipped of packed.skipped) out.note(`left out ${skipped}: neither a file, a directory nor a symlink`);

        let service = await existing;
        if (!service) {
          service = await c.createService({ name, port: o.port, env: o.env ? keyValues(o.env) : undefined, await_build: true });
          out.note(`created service ${service.name} (${service.id})`);
        } else {
          // Said out loud: a service that ran an image (on its port) runs the build from now on.
          const from = service.image === '' ? 'waiting for its first build' : `image ${service.image}`;
          out.note(`deploying into service ${service.name} (${service.id}, ${from}, port ${service.port})`);
          if (o.port !== undefined || o.env !== undefined) out.note('--port and --env apply to a new service only (svc env set changes its variables)');
        }

        const build = await uploadAndBuild(c, service.id, new Uint8Array(packed.archive));
        out.note(`build ${build.build_id} queued`);
        if (!o.wait) return build;

        await followBuild(out, c, service.id, build.build_id);
        const running = await settled(out, c, service.id);
        // The URL is the command's answer for people; --json gets the service.
        return out.json() ? running : (running.url ?? `${running.name} is running (it has no URL: svcd has no proxy address)`);
      }),
    );
}
