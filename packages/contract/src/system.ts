import { Type, type Static } from 'typebox';

export const HealthBody = Type.Object({ status: Type.Literal('ok') });
export type HealthBody = Static<typeof HealthBody>;

const Availability = Type.Object({ available: Type.Boolean(), version: Type.String() });
const DiskFigures = Type.Object({
  total_gb: Type.Number(),
  free_gb: Type.Number(),
  used_percent: Type.Number(),
});

export const HealthDetail = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  runtime: Availability,
  sandbox: Availability,
  store: Type.Object({ available: Type.Boolean(), dialect: Type.String() }),
  disk: DiskFigures,
  runtime_disk: DiskFigures,
  runtime_storage: Type.Object({
    images_size_bytes: Type.Integer(),
    containers_size_bytes: Type.Integer(),
    volumes_size_bytes: Type.Integer(),
    build_cache_size_bytes: Type.Integer(),
    total_size_gb: Type.Number(),
  }),
  proxy_networks: Type.Integer(),
  egress_firewall: Type.Object(
    { installed: Type.Boolean(), detail: Type.String() },
    { description: "svc's iptables rules that close the host and private networks to tenant workloads; missing rules make the status degraded" },
  ),
  checked_at: Type.Integer({ description: 'unix seconds when these figures were gathered (cached 30 s)' }),
});
export type HealthDetail = Static<typeof HealthDetail>;

export const HealthDetailQuery = Type.Object({
  fresh: Type.Optional(Type.Boolean({ description: 'bypass and refresh the 30 s cache' })),
});

export const ValidateTokenRequest = Type.Object({ token: Type.String() });
export type ValidateTokenRequest = Static<typeof ValidateTokenRequest>;
export const ValidateTokenResponse = Type.Object({ valid: Type.Boolean() });
export type ValidateTokenResponse = Static<typeof ValidateTokenResponse>;
