import { Type, type Static } from 'typebox';
import { Pagination, UnixSeconds } from './common.js';

/** A database's name is also its host name on the tenant's network: a DNS label. */
export const DATABASE_NAME_PATTERN = '^[a-z][a-z0-9-]{0,62}$';

export const CreateDatabaseRequest = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 63, pattern: DATABASE_NAME_PATTERN, description: 'lower-case letters, digits and hyphens, starting with a letter: the host name services use' }),
  type: Type.String({ description: 'postgres or redis' }),
});
export type CreateDatabaseRequest = Static<typeof CreateDatabaseRequest>;

export const DatabaseRecord = Type.Object({
  id: Type.String(),
  name: Type.String(),
  type: Type.String({ description: 'postgres or redis' }),
  status: Type.String({
    description: "provisioning, running, stopped or failed; on a Docker Swarm also unavailable: the node its data is on is down, drained or gone (last_error names it), and it runs there again once the node is back, never elsewhere on an empty volume",
  }),
  host: Type.String({ description: "host name on the tenant's network (the database's name)" }),
  port: Type.Integer({ description: 'port on the tenant network: 5432 or 6379' }),
  host_port: Type.Integer({ description: "this loopback port of svc's host reaches it too (on a Docker Swarm, this port of the node its data is on, open on the node's addresses; the connection string names the node's address)" }),
  username: Type.String(),
  database: Type.Union([Type.String(), Type.Null()], { description: 'postgres: the database created; redis: null' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
});
export type DatabaseRecord = Static<typeof DatabaseRecord>;
export const DatabaseList = Type.Array(DatabaseRecord);
export const DatabaseListQuery = Type.Object(Pagination);
export const DatabaseIdParams = Type.Object({ dbID: Type.String({ minLength: 1, maxLength: 64 }) });

export const ConnectionString = Type.Object({
  connection_string: Type.String({ description: "from svc's host: 127.0.0.1 and the database's host port" }),
  internal_connection_string: Type.String({ description: "from the tenant's services: the database's host name on their network" }),
  password: Type.String(),
});
export type ConnectionString = Static<typeof ConnectionString>;
