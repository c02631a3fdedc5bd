// The wire contract of svc's API: every request and response body as a TypeBox schema.
// The server validates with these and builds its OpenAPI document from them; the client
// derives its types from them, so the two cannot drift apart.
export * from './common.js';
export * from './system.js';
export * from './tenants.js';
export * from './keys.js';
export * from './activity.js';
export * from './services.js';
export * from './domains.js';
export * from './builds.js';
export * from './databases.js';
export * from './kanban.js';
export * from './environments.js';
export * from './metering.js';
export * from './web-sessions.js';
