import { Type, type Static } from 'typebox';
import { UnixSeconds } from './common.js';

/** The tenant's task board (one per tenant). */
export const KanbanBoard = Type.Object({
  id: Type.String(),
  status: Type.String({
    description: 'provisioning, running, stopped (by a suspension) or failed; on a Docker Swarm also unavailable: the node its data is on is down, drained or gone (last_error names it)',
  }),
  url: Type.String({ description: 'where the board answers; empty until it runs' }),
  host_port: Type.Integer({ description: "the port of svc's host the board is published on (from --kanban-ports; on a Docker Swarm, of the node its data is on, which url names)" }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
});
export type KanbanBoard = Static<typeof KanbanBoard>;

export const KanbanAdminToken = Type.Object({
  admin_token: Type.String({ description: "the board's administrator credential: sign in to the page with it, or send it as a bearer token to the board's /api" }),
  url: Type.String(),
});
export type KanbanAdminToken = Static<typeof KanbanAdminToken>;
