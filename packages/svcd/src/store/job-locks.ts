import type { Kysely } from 'kysely';
import type { Database } from './schema.js';
import { isUniqueViolation } from './dialect.js';

/**
 * Leases on named background jobs, so that two svcd processes on one store never run the same
 * job at once. A lease expires on its own, so a crashed holder blocks nobody for long.
 */
export class JobLockStore {
  constructor(private readonly db: Kysely<Database>) {}

  async tryAcquire(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean> {
    const expires = nowMs + ttlMs;
    // Take over an expired lease, or extend our own.
    const r = await this.db
      .updateTable('job_locks')
      .set({ holder, expires_at_ms: expires })
      .where('name', '=', name)
      .where((eb) => eb.or([eb('expires_at_ms', '<=', nowMs), eb('holder', '=', holder)]))
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) === 1) return true;
    try {
      await this.db.insertInto('job_locks').values({ name, holder, expires_at_ms: expires }).execute();
      return true;
    } catch (err) {
      if (isUniqueViolation(err)) return false;
      throw err;
    }
  }

  /**
   * Frees the leases an earlier run of the same instance held (holders are `<instance>/<boot>`):
   * that process is gone, so nobody has to wait for its leases to expire.
   */
  async releaseEarlierBoots(instance: string, currentHolder: string): Promise<number> {
    const r = await this.db
      .deleteFrom('job_locks')
      .where('holder', 'like', `${instance}/%`)
      .where('holder', '!=', currentHolder)
      .executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  async pruneExpired(nowMs: number): Promise<number> {
    const r = await this.db.deleteFrom('job_locks').where('expires_at_ms', '<=', nowMs).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  /**
   * Extends a lease the holder still holds (not lapsed): unlike tryAcquire it never takes one
   * back, so a run that lost its job to another svcd stays lost even once that run is over.
   */
  async renew(name: string, holder: string, nowMs: number, ttlMs: number): Promise<boolean> {
    const r = await this.db
      .updateTable('job_locks')
      .set({ expires_at_ms: nowMs + ttlMs })
      .where('name', '=', name)
      .where('holder', '=', holder)
      .where('expires_at_ms', '>', nowMs)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Whether the holder holds the lease now (not lapsed, not taken over). */
  async holds(name: string, holder: string, nowMs: number): Promise<boolean> {
    const row = await this.db.selectFrom('job_locks').select('name').where('name', '=', name).where('holder', '=', holder).where('expires_at_ms', '>', nowMs).executeTakeFirst();
    return row !== undefined;
  }

  async release(name: string, holder: string): Promise<void> {
    await this.db.deleteFrom('job_locks').where('name', '=', name).where('holder', '=', holder).execute();
  }
}
