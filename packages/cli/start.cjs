// bin/svc's entry (Makefile): Node's compile cache, then the CLI bundled into dist/svc.cjs. The
// cache keeps the bundle's compiled code, so that a command does not compile it again (9 ms of
// each start); it applies only to what is loaded after it is enabled, hence a file of its own.
// In the user's own cache directory ($XDG_CACHE_HOME/svc, by default ~/.cache/svc), never in the
// shared temporary one Node picks by default, nor under the current directory (a relative
// XDG_CACHE_HOME, an empty HOME): files someone else can write there would be code this one
// runs. Without a home the CLI starts without the cache. The one file of the CLI not in
// TypeScript: a few statements with nothing to type.
'use strict';
const { isAbsolute, join } = require('node:path');

function cacheDirectory() {
  const xdg = process.env.XDG_CACHE_HOME;
  // The XDG rule: a relative value is ignored.
  if (xdg && isAbsolute(xdg)) return join(xdg, 'svc', 'node-compile-cache');
  const home = require('node:os').homedir();
  return isAbsolute(home) ? join(home, '.cache', 'svc', 'node-compile-cache') : null;
}

try {
  const dir = cacheDirectory();
  if (dir !== null) require('node:module').enableCompileCache(dir);
} catch {
  // No home directory at all (os.homedir() throws): no cache.
}
require('./dist/svc.cjs');
