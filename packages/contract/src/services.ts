import { Type, type Static } from 'typebox';
import { PAGE_LIMIT_DEFAULT, pageLimit, pageOffset, UnixSeconds } from './common.js';
import { REPLICAS_MAX, WAIT_MAX_S } from './limits.js';

export const SERVICE_NAME_MAX = 128;
/** Letters, digits, hyphen, underscore, space and dot (spec 2, Service.name). */
export const SERVICE_NAME_PATTERN = '^[A-Za-z0-9 ._-]+$';
export const DEFAULT_SERVICE_PORT = 8000;
/** POSIX-ish environment variable names. */
export const ENV_KEY_PATTERN = '^[A-Za-z_][A-Za-z0-9_]*$';
export const LOG_TAIL_DEFAULT = 100;
export const LOG_TAIL_MAX = 10_000;

const ServiceName = Type.String({ minLength: 1, maxLength: SERVICE_NAME_MAX, pattern: SERVICE_NAME_PATTERN });
// Keys must match the pattern: other keys are refused, not ignored (TypeBox's Record alone would let them through).
const EnvMap = Type.Record(Type.String({ pattern: ENV_KEY_PATTERN }), Type.String({ maxLength: 32_768 }), {
  additionalProperties: false,
  propertyNames: { maxLength: 256 },
  description: 'variable names: letters, digits and underscores, not starting with a digit',
});

export const HEALTH_CHECK_PATH_MAX = 256;
const Replicas = Type.Integer({
  minimum: 1,
  maximum: REPLICAS_MAX,
  description:
    'beyond the spec: how many copies of the service run, load-balanced by the proxy (1 by default, at most 10). Each replica takes one service share of the tenant\'s memory and CPU quota: the replicas of all its services count against max_services. Above 1 only on a cluster (--runtime swarm), where each replica runs on a node of its own; elsewhere 400',
});
/**
 * How a deploy tells that the service is ready (beyond the spec). One object rather than a union
 * of two, so that a refusal names the field at fault (a union's refusal names its first member's).
 * The path is printable ASCII without spaces or '#': it goes into the request line as it is.
 */
export const HealthCheck = Type.Object(
  {
    type: Type.Union([Type.Literal('tcp'), Type.Literal('http')], { description: 'tcp (the default) or http' }),
    path: Type.Optional(
      Type.String({ maxLength: HEALTH_CHECK_PATH_MAX, pattern: '^/[!-"$-~]*$', description: 'http only, and required there: starts with /; printable ASCII without spaces or #' }),
    ),
  },
  {
    additionalProperties: false,
    description:
      "beyond the spec: when a deploy counts the service as ready. tcp (the default): its port accepts a connection (tried every 5 ms for the first second the container runs, then every 25 ms); http: GET path on its port answers 2xx or 3xx (redirects are not followed; each try is given 5 s), tried again a quarter second after each try until the deploy's readiness limit (60 s; a try under way then is waited for)",
  },
);
export type HealthCheck = Static<typeof HealthCheck>;

export const CreateServiceRequest = Type.Object({
  name: ServiceName,
  image: Type.Optional(Type.String({ minLength: 1, maxLength: 512, description: 'Docker Hub or a loopback registry (127.0.0.1:PORT/..., localhost:PORT/...)' })),
  port: Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, description: '0 or absent means 8000' })),
  env: Type.Optional(EnvMap),
  health_check: Type.Optional(HealthCheck),
  replicas: Type.Optional(Replicas),
  await_build: Type.Optional(
    Type.Boolean({
      description:
        'beyond the spec: true creates the service without an image (leave image out), stopped, to be deployed by its first successful build (`svc deploy` of a directory); start, restart and redeploy answer 409 until then',
    }),
  ),
});
export type CreateServiceRequest = Static<typeof CreateServiceRequest>;

export const CreateServiceQuery = Type.Object({
  from_snapshot: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
});

export const Service = Type.Object({
  id: Type.String(),
  name: Type.String(),
  image: Type.String(),
  port: Type.Integer(),
  status: Type.String({ description: 'deploying, running, stopped, failed or crashed' }),
  url: Type.Union([Type.String(), Type.Null()], { description: 'where users open the service; null until it is routed' }),
  dns_label: Type.String(),
  health_check: HealthCheck,
  replicas: Type.Integer({ description: 'beyond the spec: how many copies run (see POST /v1/services/{serviceID}/scale)' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  crash_count: Type.Integer({ description: 'unexpected exits in the current 10-minute window' }),
  circuit_open: Type.Boolean({ description: 'true after 5 crashes in 10 minutes: no more restarts until reset' }),
  last_crash_at: Type.Union([UnixSeconds, Type.Null()]),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
});
export type Service = Static<typeof Service>;
export const ServiceList = Type.Array(Service);

export const ServiceIdParams = Type.Object({ serviceID: Type.String({ minLength: 1, maxLength: 64 }) });
export const RenameServiceRequest = Type.Object({ name: ServiceName }, { additionalProperties: false });
export const ScaleServiceRequest = Type.Object({ replicas: Replicas }, { additionalProperties: false });
export type ScaleServiceRequest = Static<typeof ScaleServiceRequest>;

export const ServiceGetQuery = Type.Object({
  wait: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: WAIT_MAX_S,
      description: `beyond the spec: seconds (1-${WAIT_MAX_S}). While the service is deploying, the answer waits until the deploy ends or the time is up, then gives the service as it is then (still deploying when the time ran out)`,
    }),
  ),
});

export const ServiceListQuery = Type.Object({
  limit: pageLimit(PAGE_LIMIT_DEFAULT),
  offset: pageOffset(),
});

export const Deployment = Type.Object({
  id: Type.String(),
  service_id: Type.String(),
  status: Type.String({ description: 'pending, running, succeeded, failed or cancelled' }),
  reason: Type.String({ description: 'create, start, restart, redeploy, reset, crash, build, scale (beyond the spec), resume or reconcile (by svc itself)' }),
  image: Type.String(),
  build_id: Type.Union([Type.String(), Type.Null()], { description: 'the build that produced the image (reason build)' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  created_at: UnixSeconds,
  started_at: Type.Union([UnixSeconds, Type.Null()]),
  finished_at: Type.Union([UnixSeconds, Type.Null()]),
});
export type Deployment = Static<typeof Deployment>;
export const DeploymentList = Type.Array(Deployment);
export const DeploymentParams = Type.Object({
  serviceID: Type.String({ minLength: 1, maxLength: 64 }),
  deploymentID: Type.String({ minLength: 1, maxLength: 64 }),
});

/** Answer of start, stop, restart, redeploy and reset: the service and the deployment started, if any. */
export const LifecycleResponse = Type.Object({
  service: Service,
  deployment: Type.Union([Deployment, Type.Null()]),
});
export type LifecycleResponse = Static<typeof LifecycleResponse>;

export const LogsQuery = Type.Object({
  follow: Type.Optional(Type.Boolean()),
  tail: Type.Optional(Type.Integer({ minimum: 0, maximum: LOG_TAIL_MAX, description: 'default 100, max 10000' })),
});

export const EnvQuery = Type.Object({ reveal: Type.Optional(Type.Boolean({ description: 'show values (audit-logged)' })) });
export const EnvVars = Type.Record(Type.String(), Type.String());
export const SetEnvRequest = EnvMap;
export const EnvKeyParams = Type.Object({
  serviceID: Type.String({ minLength: 1, maxLength: 64 }),
  key: Type.String({ minLength: 1, maxLength: 256 }),
});

export const CreateSnapshotRequest = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 128 }),
  description: Type.Optional(Type.String({ maxLength: 1024 })),
});
export type CreateSnapshotRequest = Static<typeof CreateSnapshotRequest>;

export const Snapshot = Type.Object({
  id: Type.String(),
  name: Type.String(),
  description: Type.String(),
  service_id: Type.Union([Type.String(), Type.Null()], { description: 'the service it was taken from; null once that service is deleted' }),
  image: Type.String(),
  port: Type.Integer(),
  health_check: HealthCheck,
  env_keys: Type.Array(Type.String(), { description: 'names of the saved variables (values are sealed and never shown)' }),
  created_at: UnixSeconds,
});
export type Snapshot = Static<typeof Snapshot>;
export const SnapshotList = Type.Array(Snapshot);
export const SnapshotIdParams = Type.Object({ snapshotID: Type.String({ minLength: 1, maxLength: 64 }) });
