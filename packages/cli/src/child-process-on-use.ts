// node:child_process, loaded when a process is started rather than when the CLI starts. The
// bundle (Makefile: esbuild's --alias) gives every import of node:child_process this module:
// commander imports it at its top for subcommands that are programs of their own, which svc has
// none of, and loading it (dgram, the child process internals) cost 2-3 ms of every command's
// start. A named import of anything but spawn fails the bundle's build; the default export, which
// commander reads (`childProcess.spawn`), hands on whatever member is asked for, so that a
// dependency reading another one through it still gets it (loading the module then).
import type * as ChildProcess from 'node:child_process';

const real = () => process.getBuiltinModule('node:child_process');

export const spawn = ((...args: unknown[]): unknown => {
  const childProcess = real();
  return Reflect.apply(childProcess.spawn, childProcess, args);
}) as typeof ChildProcess.spawn;

export default new Proxy({} as typeof ChildProcess, { get: (_target, member) => Reflect.get(real(), member) as unknown });
