// bin/svc's entry (Makefile): Node's compile cache, then the CLI bundled into dist/svc.cjs. The
// cache keeps the bundle's compiled code, so that a command does not compile it again (9 ms of
// each start); it applies only to what is loaded after it is enabled, hence a file of its own. In
// the user's own cache directory, not the shared temporary one Node picks by default: another
// user's files there would be code this one runs. The one file of the CLI not in TypeScript: two
// statements with nothing to type.
const { join } = require('node:path');
require('node:module').enableCompileCache(join(process.env.XDG_CACHE_HOME || join(require('node:os').homedir(), '.cache'), 'svc', 'node-compile-cache'));
require('./dist/svc.cjs');
