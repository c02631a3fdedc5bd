import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export class SettingsStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** The stored value, or `fresh` stored first; concurrent callers all get the one that won. */
  async getOrCreate(key: string, fresh: string): Promise<string> {
    await this.db
      .insertInto('settings')
      .values({ key, value: fresh })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    const row = await this.db.selectFrom('settings').select('value').where('key', '=', key).executeTakeFirstOrThrow();
    return row.value;
  }
}
