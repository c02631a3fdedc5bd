import { Type, type Static } from 'typebox';

/** Every error response: a human-readable message; the HTTP status carries the class. */
export const ErrorBody = Type.Object({ error: Type.String() }, { $id: 'Error' });
export type ErrorBody = Static<typeof ErrorBody>;

/** Unix seconds. */
export const UnixSeconds = Type.Integer({ minimum: 0, description: 'unix seconds' });

/** limit/offset pagination (spec 4, Pagination): larger limits are clamped, not refused. */
export const Pagination = {
  limit: Type.Optional(Type.Integer({ minimum: 1, description: 'default 100, larger values are clamped to 200' })),
  offset: Type.Optional(Type.Integer({ minimum: 0, default: 0 })),
};

export const PAGE_LIMIT_DEFAULT = 100;
export const PAGE_LIMIT_MAX = 200;
