import { ErrorBody } from '@svc/contract';

/** The error answers a route can give, for its OpenAPI entry (all are {error: string}). */
export function errors(...statuses: number[]): Record<number, typeof ErrorBody> {
  return Object.fromEntries(statuses.map((s) => [s, ErrorBody]));
}

/** Errors every key route can give: bad key, rate limit, timeout. */
export const KEY_ROUTE_ERRORS = [400, 401, 429, 503] as const;
