export type Dialect = 'sqlite' | 'postgres';

/** A unique-constraint violation from either engine (SQLite's code, or PostgreSQL's 23505). */
export function isUniqueViolation(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const code = (err as { code?: unknown }).code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === '23505';
}
