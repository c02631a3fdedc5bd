// What most of svcd's domain modules are built from. app.ts builds one Platform at start-up; each
// module's Deps interface picks the parts it uses by name, so that a constructor takes one object
// and a test builds only what the module under test needs.
import type { Logger } from 'pino';
import type { Activity } from './activity/activity.js';
import type { Clock, Timers } from './clock.js';
import type { Runtime } from './runtime/index.js';
import type { Sealer } from './secrets/sealer.js';
import type { Store } from './store/index.js';

export interface Platform {
  store: Store;
  runtime: Runtime;
  sealer: Sealer;
  activity: Activity;
  clock: Clock;
  timers: Timers;
  log: Logger;
  /** The audit log: who did what to which resource (separate from the operational log). */
  audit: Logger;
  /** This process's lease holder id (instance/boot), written on the leases it takes. */
  holder: string;
}
