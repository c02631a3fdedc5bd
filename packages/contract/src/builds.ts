import { Type, type Static } from 'typebox';
import { PAGE_LIMIT_DEFAULT, pageLimit, Pagination, UnixSeconds } from './common.js';

/** Stored build output per build; when it grows past this, the oldest output is dropped. */
export const BUILD_LOG_MAX_BYTES = 5 * 1024 * 1024;

export const CreateBuildRequest = Type.Object({
  source_type: Type.String({ description: 'git (the only source type)' }),
  source_url: Type.String({ minLength: 1, maxLength: 2048, description: 'https:// or git:// URL of a public host' }),
  source_ref: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'branch, tag or commit SHA; absent: the default branch' })),
});
export type CreateBuildRequest = Static<typeof CreateBuildRequest>;

export const CreateBuildResponse = Type.Object({
  build_id: Type.String(),
  status: Type.String({ description: 'queued' }),
  image: Type.String({ description: 'the tag the build produces: svc/<tenant>/<service>:<build>' }),
});
export type CreateBuildResponse = Static<typeof CreateBuildResponse>;

export const Build = Type.Object({
  id: Type.String(),
  service_id: Type.String(),
  status: Type.String({ description: 'queued, running, succeeded, failed or cancelled' }),
  source_type: Type.String(),
  source_url: Type.String(),
  source_ref: Type.Union([Type.String(), Type.Null()]),
  image: Type.String(),
  commit_sha: Type.Union([Type.String(), Type.Null()], { description: 'the commit built, once cloned' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  deployment_id: Type.Union([Type.String(), Type.Null()], { description: 'the deployment of the built image, once succeeded' }),
  created_at: UnixSeconds,
  started_at: Type.Union([UnixSeconds, Type.Null()]),
  finished_at: Type.Union([UnixSeconds, Type.Null()]),
  duration_ms: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], { description: 'from start to finish' }),
});
export type Build = Static<typeof Build>;
export const BuildList = Type.Array(Build);

export const BuildParams = Type.Object({
  serviceID: Type.String({ minLength: 1, maxLength: 64 }),
  buildID: Type.String({ minLength: 1, maxLength: 64 }),
});
export const BuildListQuery = Type.Object(Pagination);
export const TenantBuildsQuery = Type.Object({
  limit: pageLimit(PAGE_LIMIT_DEFAULT),
});
export const BuildLogsQuery = Type.Object({
  follow: Type.Optional(Type.Boolean({ description: 'stream until the build ends' })),
});
export const CancelBuildResponse = Type.Object({ status: Type.Literal('cancelled') });
export type CancelBuildResponse = Static<typeof CancelBuildResponse>;
