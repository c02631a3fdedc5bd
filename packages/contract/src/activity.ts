import { Type, type Static } from 'typebox';
import { pageLimit, pageOffset, QUERY_UNIX_SECONDS_MAX, UnixSeconds } from './common.js';

export const ACTIVITY_LIMIT_DEFAULT = 50;

export const ActivityEntry = Type.Object({
  id: Type.String(),
  action: Type.String({ description: '<resource>.<verb>, e.g. service.created' }),
  resource_type: Type.String(),
  resource_id: Type.String(),
  service_id: Type.Union([Type.String(), Type.Null()]),
  details: Type.Record(Type.String(), Type.Unknown()),
  created_at: UnixSeconds,
});
export type ActivityEntry = Static<typeof ActivityEntry>;
export const ActivityList = Type.Array(ActivityEntry);

export const ActivityQuery = Type.Object({
  limit: pageLimit(ACTIVITY_LIMIT_DEFAULT),
  offset: pageOffset(),
  resource_type: Type.Optional(Type.String({ maxLength: 64 })),
  action: Type.Optional(Type.String({ maxLength: 64 })),
  service_id: Type.Optional(Type.String({ maxLength: 64 })),
  since: Type.Optional(Type.Integer({ minimum: 0, maximum: QUERY_UNIX_SECONDS_MAX, description: 'unix seconds' })),
});
export type ActivityQuery = Static<typeof ActivityQuery>;
