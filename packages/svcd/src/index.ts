// The server as a library: what main.ts and the tests use to start svcd.
export { createDeps, closeDeps, startBackground, type Deps, type DepsOverrides } from './app.js';
export { buildServer, type SvcServer } from './api/server.js';
export { buildConfig, ConfigError, DEFAULT_DASHBOARD_DIR, DEFAULT_DATABASE_PORTS, DEFAULT_KANBAN_PORTS, DEFAULT_SWARM_PORTS, parsePortRange, DEFAULT_STALLED_READER_S, DEFAULT_CONNECTIONS_PER_CLIENT, DEFAULT_WORKLOAD_LEASE_S, type Config, type RawOptions, SPEC_RATE_LIMITS } from './config.js';
export { type Clock, type Timers, type TimerHandle, systemClock, systemTimers } from './clock.js';
export { openStore, type Store } from './store/index.js';
export { DockerRuntime, type Runtime } from './runtime/index.js';
