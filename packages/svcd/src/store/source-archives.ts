import type { ExpressionBuilder, Kysely } from 'kysely';
import type { Database, SourceArchiveRow, SourceArchivesTable } from './schema.js';

/** Uploaded source archives and their bytes, in chunks in upload order (seq from 1). */
export class SourceArchiveStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: Omit<SourceArchivesTable, 'build_id'>): Promise<void> {
    await this.db.insertInto('source_archives').values({ ...row, build_id: null }).execute();
  }

  /**
   * What the upload turned out to be, once all of it is stored and checked; false when the row is
   * gone (its service was deleted while the archive came).
   */
  async describe(id: string, d: Pick<SourceArchivesTable, 'size_bytes' | 'sha256' | 'files' | 'unpacked_bytes'>): Promise<boolean> {
    const r = await this.db.updateTable('source_archives').set(d).where('id', '=', id).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async appendChunk(sourceId: string, seq: number, data: Buffer): Promise<void> {
    await this.db.insertInto('source_archive_chunks').values({ source_id: sourceId, seq, data }).execute();
  }

  /** Scoped by tenant and service: a foreign upload and a missing one are the same undefined. */
  find(tenantId: string, serviceId: string, id: string): Promise<SourceArchiveRow | undefined> {
    return this.db.selectFrom('source_archives').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId).where('service_id', '=', serviceId).executeTakeFirst();
  }

  findAny(id: string): Promise<SourceArchiveRow | undefined> {
    return this.db.selectFrom('source_archives').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Archives the tenant has in the store: waiting for a build, or taken by one not yet ended (the per-tenant cap counts them). */
  async countStored(tenantId: string): Promise<number> {
    const r = await this.db
      .selectFrom('source_archives')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** The build takes the archive; false when another build took it first. */
  async claim(id: string, buildId: string): Promise<boolean> {
    const r = await this.db.updateTable('source_archives').set({ build_id: buildId }).where('id', '=', id).where('build_id', 'is', null).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Chunks after `afterSeq`, in order, at most `limit` (a reader holds a few, never the archive). */
  chunks(sourceId: string, afterSeq: number, limit: number): Promise<Array<{ seq: number; data: Buffer }>> {
    return this.db
      .selectFrom('source_archive_chunks')
      .select(['seq', 'data'])
      .where('source_id', '=', sourceId)
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom('source_archive_chunks').where('source_id', '=', id).execute();
    await this.db.deleteFrom('source_archives').where('id', '=', id).execute();
  }

  /**
   * Archives due for removal, at most `limit`: unused ones uploaded before `unusedBefore`, and those
   * whose build has finished (or is gone), which the build's own clean-up missed (its svcd died).
   */
  async listDue(unusedBefore: number, limit: number): Promise<string[]> {
    const rows = await this.db.selectFrom('source_archives').select('id').where((eb) => this.due(eb, unusedBefore)).limit(limit).execute();
    return rows.map((r) => r.id);
  }

  /** Removes the archive (its chunks go with it) if it is still due: a build may have taken it since it was listed. */
  async deleteIfDue(id: string, unusedBefore: number): Promise<boolean> {
    const r = await this.db.deleteFrom('source_archives').where('id', '=', id).where((eb) => this.due(eb, unusedBefore)).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  private due(eb: ExpressionBuilder<Database, 'source_archives'>, unusedBefore: number) {
    const buildUnfinished = eb
      .selectFrom('builds')
      .select('builds.id')
      .whereRef('builds.id', '=', 'source_archives.build_id')
      .where('builds.status', 'in', ['queued', 'running']);
    return eb.or([
      eb.and([eb('source_archives.build_id', 'is', null), eb('source_archives.created_at', '<', unusedBefore)]),
      eb.and([eb('source_archives.build_id', 'is not', null), eb.not(eb.exists(buildUnfinished))]),
    ]);
  }
}
