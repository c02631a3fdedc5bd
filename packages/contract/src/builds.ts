import { Type, type Static } from 'typebox';
import { PAGE_LIMIT_DEFAULT, pageLimit, Pagination, UnixSeconds } from './common.js';
import { WAIT_MAX_S } from './limits.js';

/** Stored build output per build; when it grows past this, the oldest output is dropped. */
export const BUILD_LOG_MAX_BYTES = 5 * 1024 * 1024;

export { SOURCE_ARCHIVE_MAX_BYTES, SOURCE_UNPACKED_MAX_BYTES } from './limits.js';
/** Entries (files, directories, links) an archive may hold. */
export const SOURCE_ARCHIVE_MAX_ENTRIES = 50_000;
/** Uploaded archives a tenant has in the store at once (waiting for a build, or taken by one not yet ended); one more is 409. */
export const SOURCE_ARCHIVES_STORED_MAX = 3;
/** An upload no build took is removed this long after it arrived. */
export const SOURCE_ARCHIVE_UNUSED_TTL_SECONDS = 3600;

export const CreateBuildRequest = Type.Object({
  source_type: Type.String({ description: 'git, or archive (beyond the spec: an archive uploaded to POST /v1/services/{id}/sources)' }),
  source_url: Type.Optional(Type.String({ minLength: 1, maxLength: 2048, description: 'git: https:// or git:// URL of a public host (required for git)' })),
  source_ref: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'git: branch, tag or commit SHA; absent: the default branch' })),
  source_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'archive: the id of an upload of this service that no build took yet (required for archive)' })),
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
  source_url: Type.String({ description: 'git: the URL; archive: archive:sha256:<hex of the uploaded archive>' }),
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

export const SourceArchive = Type.Object({
  id: Type.String(),
  service_id: Type.String(),
  size_bytes: Type.Integer({ description: 'the archive as uploaded' }),
  sha256: Type.String({ description: 'of the archive as uploaded (hex)' }),
  files: Type.Integer({ description: 'regular files in it' }),
  unpacked_bytes: Type.Integer(),
  created_at: UnixSeconds,
  expires_at: UnixSeconds,
});
export type SourceArchive = Static<typeof SourceArchive>;

export const SourceUploadQuery = Type.Object({
  build: Type.Optional(
    Type.Boolean({
      description:
        'beyond the two steps: also queue the build of this archive, in the same request (as POST /v1/services/{id}/builds with source_type archive and its id would); answered under `build`. Either both happen or neither: a build the tenant cannot queue now (its queue of builds full) is refused with its status, and the archive is not kept',
    }),
  ),
});
/** An upload as answered: the archive, and with ?build=true the build that takes it. */
export const SourceUpload = Type.Object({
  ...SourceArchive.properties,
  build: Type.Optional(Type.Object(CreateBuildResponse.properties, { description: 'with ?build=true: the build queued for this archive' })),
});
export type SourceUpload = Static<typeof SourceUpload>;

export const BuildParams = Type.Object({
  serviceID: Type.String({ minLength: 1, maxLength: 64 }),
  buildID: Type.String({ minLength: 1, maxLength: 64 }),
});
export const BuildGetQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: WAIT_MAX_S,
      description: `beyond the spec: seconds (1-${WAIT_MAX_S}). While the build is queued or running, the answer waits until it ends or the time is up, then gives the build as it is then (still queued or running when the time ran out)`,
    }),
  ),
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
