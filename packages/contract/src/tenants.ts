import { Type, type Static } from 'typebox';
import { PAGE_LIMIT_DEFAULT, pageLimit, pageOffset, UnixSeconds } from './common.js';

export const TENANT_NAME_MIN = 2;
export const TENANT_NAME_MAX = 128;
export const EMAIL_MAX = 256;
/** Spec 2, Tenant.email. */
export const EMAIL_PATTERN = '^[a-zA-Z0-9._%+\\-]+@[a-zA-Z0-9.\\-]+\\.[a-zA-Z]{2,}$';

const TenantName = Type.String({ minLength: TENANT_NAME_MIN, maxLength: TENANT_NAME_MAX });

export const RegisterRequest = Type.Object({
  name: TenantName,
  email: Type.String({ maxLength: EMAIL_MAX, pattern: EMAIL_PATTERN }),
});
export type RegisterRequest = Static<typeof RegisterRequest>;

export const RegisterResponse = Type.Object({
  tenant_id: Type.String({ description: 'hex' }),
  api_key: Type.String({ description: '<keyID>.<secret>; the secret is never shown again' }),
});
export type RegisterResponse = Static<typeof RegisterResponse>;

export const TenantStatus = Type.Union([Type.Literal('active'), Type.Literal('suspended')]);
export type TenantStatus = Static<typeof TenantStatus>;

export const Tenant = Type.Object({
  id: Type.String(),
  name: Type.String(),
  email: Type.String(),
  status: TenantStatus,
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
});
export type Tenant = Static<typeof Tenant>;

/** Only the name can change; email is fixed at registration, so other fields are refused. */
export const UpdateTenantRequest = Type.Object({ name: TenantName }, { additionalProperties: false });
export type UpdateTenantRequest = Static<typeof UpdateTenantRequest>;

const UsedMax = Type.Object({ used: Type.Integer(), max: Type.Integer() });
/** Services: `used` counts service shares, one per replica (beyond the spec: without replicas, one per service). */
const ServiceShares = Type.Object(UsedMax.properties, { description: 'used: the service shares taken, one per service, or one per replica of a service with several (beyond the spec); max: max_services' });
export const TenantUsage = Type.Object({
  services: ServiceShares,
  databases: UsedMax,
  api_keys: UsedMax,
  environments: UsedMax,
  memory_mb: Type.Integer(),
  cpu_cores: Type.Number(),
  disk_gb: Type.Integer(),
  disk_used_bytes: Type.Integer({
    description:
      "what the tenant's containers' writable layers and volumes took at the last measurement (every metering interval); at disk_gb new services, databases and environments are refused (409), and 10 percent past it running services and environments are stopped",
  }),
  disk_measured_at: Type.Union([Type.Integer(), Type.Null()], { description: 'unix seconds of that measurement; null before the first' }),
  rate_limit: Type.Integer({ description: 'reported only; the enforced HTTP limits are fixed' }),
});
export type TenantUsage = Static<typeof TenantUsage>;

/** Caps of the operator quota patch (spec 4, Tenants). */
export const QUOTA_CAPS = {
  max_services: 100,
  max_databases: 50,
  max_builds_concurrent: 10,
  max_env_vars_per_service: 500,
  /** Beyond the spec's patch: the disk quota, in GB (GiB). */
  max_disk_gb: 10_000,
  /** Beyond the spec: custom domains per service. */
  max_domains_per_service: 100,
} as const;

export const QuotaPatchRequest = Type.Object(
  {
    max_services: Type.Optional(Type.Integer({ minimum: 1, maximum: QUOTA_CAPS.max_services })),
    max_databases: Type.Optional(Type.Integer({ minimum: 1, maximum: QUOTA_CAPS.max_databases })),
    max_builds_concurrent: Type.Optional(Type.Integer({ minimum: 1, maximum: QUOTA_CAPS.max_builds_concurrent })),
    max_env_vars_per_service: Type.Optional(Type.Integer({ minimum: 1, maximum: QUOTA_CAPS.max_env_vars_per_service })),
    max_disk_gb: Type.Optional(Type.Integer({ minimum: 1, maximum: QUOTA_CAPS.max_disk_gb, description: 'beyond the spec: the disk quota (GiB)' })),
    max_domains_per_service: Type.Optional(Type.Integer({ minimum: 0, maximum: QUOTA_CAPS.max_domains_per_service, description: 'beyond the spec: custom domains per service (0: none)' })),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type QuotaPatchRequest = Static<typeof QuotaPatchRequest>;

export const QuotaRecord = Type.Object({
  tenant_id: Type.String(),
  max_services: Type.Integer(),
  max_databases: Type.Integer(),
  max_builds_concurrent: Type.Integer(),
  max_env_vars_per_service: Type.Integer(),
  max_environments: Type.Integer(),
  max_memory_mb: Type.Integer(),
  max_cpu_cores: Type.Number(),
  max_disk_gb: Type.Integer(),
  max_domains_per_service: Type.Integer({ description: 'beyond the spec: custom domains per service' }),
  api_rate_limit: Type.Integer(),
});
export type QuotaRecord = Static<typeof QuotaRecord>;

export const TenantIdParams = Type.Object({ tenantID: Type.String({ minLength: 1, maxLength: 64 }) });

export const ReactivateResponse = Type.Object({
  tenant_id: Type.String(),
  api_key: Type.String(),
  status: TenantStatus,
});
export type ReactivateResponse = Static<typeof ReactivateResponse>;

/** Operator list of tenants (beyond the spec): spec pagination, oldest first. */
export const TenantListQuery = Type.Object({
  limit: pageLimit(PAGE_LIMIT_DEFAULT),
  offset: pageOffset(),
  status: Type.Optional(TenantStatus),
});
export type TenantListQuery = Static<typeof TenantListQuery>;

export const TenantSummary = Type.Object({
  ...Tenant.properties,
  usage: Type.Object({
    services: ServiceShares,
    databases: UsedMax,
    environments: UsedMax,
    disk_used_bytes: Type.Integer(),
    disk_gb: Type.Integer(),
  }),
});
export type TenantSummary = Static<typeof TenantSummary>;
export const TenantSummaryList = Type.Array(TenantSummary);
