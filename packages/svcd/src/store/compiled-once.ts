import type { CompiledQuery, Kysely } from 'kysely';

/**
 * A query built and compiled once, then run with new parameter values. Kysely rebuilds and
 * recompiles a query on every call; for the two reads on every authenticated request (the key
 * lookup and the tenant read) that was a measurable part of the request (bench/api). The SQL of
 * these queries does not depend on the values, only the positional parameters change, so the
 * compiled form is reused with the values swapped in. Use it only for such fixed-shape queries.
 * The values are the positional parameters in order; the caller's own field types them.
 */
export function compiledOnce<DB, Row>(
  db: Kysely<DB>,
  build: () => { compile(): CompiledQuery<Row> },
): (...args: unknown[]) => Promise<Row[]> {
  let compiled: CompiledQuery<Row> | null = null;
  return async (...args: unknown[]) => {
    compiled ??= build().compile();
    const r = await db.executeQuery<Row>({ ...compiled, parameters: args });
    return r.rows;
  };
}
