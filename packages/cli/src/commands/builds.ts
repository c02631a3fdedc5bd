// Builds from git (an uploaded directory: `svc deploy`, deploy.ts): create (with --wait, the log streamed as it is written), list, show, logs, cancel.
import type { Command } from 'commander';
import type { Cli } from '../context.js';
import type { Build, SvcClient } from '@svc/client';
import { action, integer, pipeToStdout, waitUntil, type Output } from '../output.js';

const TERMINAL = ['succeeded', 'failed', 'cancelled'];
/** A build's own deadline on the server is 10 minutes; its deploy follows. */
const BUILD_WAIT_MS = 20 * 60_000;

/**
 * Streams the build's log to stderr (progress, not data) until it ends, then resolves with the
 * build when it succeeded; a failed or cancelled build fails the command with its error.
 */
export async function followBuild(out: Output, c: SvcClient, serviceId: string, buildId: string): Promise<Build> {
  for await (const chunk of (await c.followBuildLogs(serviceId, buildId)) as unknown as AsyncIterable<Uint8Array>) process.stderr.write(chunk);
  return waitUntil(out, 'build', () => c.build(serviceId, buildId), (v) => TERMINAL.includes(v.status), 'succeeded', BUILD_WAIT_MS);
}

export function buildCommands(program: Command, { out, client }: Cli): void {
  const builds = program.command('builds').alias('build').description('image builds from git');
  builds
    .command('create <serviceID>')
    .description('build an image from a git repository (Dockerfile at its root) and deploy it')
    .requiredOption('--git-url <url>', 'https:// or git:// URL')
    .option('--ref <ref>', 'branch, tag or commit (default: the default branch)')
    .option('--wait', "stream the build's log to stderr and wait for its outcome")
    .action(
      action(out, async (serviceId: string, o: { gitUrl: string; ref?: string; wait?: boolean }) => {
        const c = client();
        const created = await c.createBuild(serviceId, { source_type: 'git', source_url: o.gitUrl, source_ref: o.ref });
        if (!o.wait) return created;
        out.note(`build ${created.build_id} queued: ${created.image}`);
        return followBuild(out, c, serviceId, created.build_id);
      }),
    );
  builds
    .command('list [serviceID]')
    .description("a service's builds, or the tenant's latest")
    .option('--limit <n>', 'tenant-wide: how many', integer)
    .action(
      action(out, (serviceId: string | undefined, o: { limit?: number }) => (serviceId ? client().builds(serviceId) : client().tenantBuilds(o.limit)), {
        columns: ['id', 'service_id', 'status', 'source_url', 'age'],
      }),
    );
  builds.command('show <serviceID> <buildID>').description('one build').action(action(out, (s: string, b: string) => client().build(s, b)));
  builds
    .command('logs <serviceID> <buildID>').description("a build's output (-f: until it ends)")
    .option('-f, --follow', 'keep printing until the build ends')
    .action(
      action(out, async (s: string, b: string, o: { follow?: boolean }) => {
        if (o.follow) await pipeToStdout(await client().followBuildLogs(s, b));
        else process.stdout.write(await client().buildLogs(s, b));
      }),
    );
  builds.command('cancel <serviceID> <buildID>').description('cancel a queued or running build').action(action(out, (s: string, b: string) => client().cancelBuild(s, b)));
}
