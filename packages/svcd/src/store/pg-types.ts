import pg from 'pg';

// node-postgres returns int8 as strings by default (to be safe past 2^53); our int8 columns are
// unix seconds, milliseconds and byte counts, so numbers are right. Set per pool, not on the
// global `pg.types`.
export const pgTypes: pg.CustomTypesConfig = {
  getTypeParser: (oid, format): unknown => (oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)),
};
