import type BetterSqlite3 from 'better-sqlite3';
import type { SqliteDatabase, SqliteStatement } from 'kysely';

/**
 * Kysely's SQLite driver calls prepare() for every query; preparing costs more than running a
 * point query (it was an eighth of the CPU of an authenticated GET). better-sqlite3 statements
 * are reusable, and Kysely runs them synchronously one at a time, so a bounded cache keyed by the
 * SQL text is safe. Values are bound per call, so the SQL text is a complete key.
 */
export function withStatementCache(db: BetterSqlite3.Database, maxStatements = 500): SqliteDatabase {
  const cache = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => db.close(),
    prepare(sql: string): SqliteStatement {
      let stmt = cache.get(sql);
      if (stmt) {
        cache.delete(sql);
      } else {
        stmt = db.prepare(sql);
        if (cache.size >= maxStatements) {
          const oldest = cache.keys().next().value;
          if (oldest !== undefined) cache.delete(oldest);
        }
      }
      cache.set(sql, stmt);
      return stmt;
    },
  };
}
