import type { Kysely } from 'kysely';

/**
 * The token of an environment's agent (svc-init serving exec inside the container,
 * environments/agent.ts), sealed: on the environment, and on a warm-pool container until an
 * environment takes it. Environments of before have none and keep using the engine's exec.
 */
export const environmentAgents = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('environments').addColumn('agent_token', 'text').execute();
    await db.schema.alterTable('warm_environments').addColumn('agent_token', 'text').execute();
  },
};
