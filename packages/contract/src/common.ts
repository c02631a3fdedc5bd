import { Type, type Static } from 'typebox';

/**
 * Every error response: a human-readable message; the HTTP status carries the class. request_id
 * (additive) is the X-Request-Id of the answer, so a report of a failure finds its log line.
 */
export const ErrorBody = Type.Object(
  {
    error: Type.String(),
    request_id: Type.Optional(Type.String({ description: "the answer's X-Request-Id; svcd's log lines of this request carry it as reqId" })),
  },
  { $id: 'Error' },
);
export type ErrorBody = Static<typeof ErrorBody>;

/** Unix seconds. */
export const UnixSeconds = Type.Integer({ minimum: 0, description: 'unix seconds' });

export const PAGE_LIMIT_DEFAULT = 100;
export const PAGE_LIMIT_MAX = 200;

/**
 * The largest limit or offset a query accepts (2^31 - 1). Query numbers are coerced from text, so
 * without a maximum "99999999999999999999" arrives as 1e20 and the store refuses it (a 500);
 * both stores take any integer up to here as a row count, and no list comes near it.
 */
export const QUERY_COUNT_MAX = 2_147_483_647;

/** The last second of year 9999: the latest unix-seconds instant a query accepts (RFC 3339's four-digit years end there too). */
export const QUERY_UNIX_SECONDS_MAX = 253_402_300_799;

/** A page size: values from 201 up to QUERY_COUNT_MAX are clamped to 200 (spec: clamped, not refused); beyond it 400. */
export const pageLimit = (defaultSize: number) =>
  Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: QUERY_COUNT_MAX,
      description: `default ${defaultSize}; larger values are clamped to ${PAGE_LIMIT_MAX} (above ${QUERY_COUNT_MAX}: 400)`,
    }),
  );

export const pageOffset = () => Type.Optional(Type.Integer({ minimum: 0, maximum: QUERY_COUNT_MAX, default: 0 }));

/** limit/offset pagination (spec 4, Pagination): larger limits are clamped, not refused. */
export const Pagination = {
  limit: pageLimit(PAGE_LIMIT_DEFAULT),
  offset: pageOffset(),
};
