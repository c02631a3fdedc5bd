// node:child_process, loaded when a process is started rather than when the CLI starts. The
// bundle (Makefile: esbuild's --alias) gives every import of node:child_process this module:
// commander imports it at its top for subcommands that are programs of their own, which svc has
// none of, and loading it (dgram, the child process internals) cost 2-3 ms of every command's
// start. Only spawn is here, the one function the CLI and commander call: a bundle that imports
// another name from node:child_process fails to build instead of running without it.
import type * as ChildProcess from 'node:child_process';

export const spawn = ((...args: unknown[]): unknown => {
  const real = process.getBuiltinModule('node:child_process');
  return Reflect.apply(real.spawn, real, args);
}) as typeof ChildProcess.spawn;

// commander's `import childProcess from 'node:child_process'` reads the default export.
export default { spawn };
