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
    { description: "svc's iptables rules that close the host and private networks to tenant workloads, on svcd's host and, with --runtime swarm, on every node (the detail names no node: the svcd log does); missing rules make the status degraded" },
  ),
  nodes: Type.Object(
    { total: Type.Integer(), down: Type.Integer() },
    { description: 'Swarm nodes (--runtime swarm) and how many of them are not ready (the status is degraded then); 0 and 0 on one engine' },
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

export const ClusterNode = Type.Object({
  id: Type.String(),
  hostname: Type.String(),
  role: Type.Union([Type.Literal('manager'), Type.Literal('worker')]),
  state: Type.String({ description: "Swarm's view of the node: ready, down, unknown or disconnected" }),
  availability: Type.Union([Type.Literal('active'), Type.Literal('pause'), Type.Literal('drain')], {
    description: 'active: takes tasks; drain: its tasks move to other nodes and it takes no new ones',
  }),
  address: Type.String(),
  engine_version: Type.String(),
  tasks: Type.Integer({ description: "svc's tasks running on the node" }),
  memory_bytes: Type.Integer(),
  cpus: Type.Number(),
});
export type ClusterNode = Static<typeof ClusterNode>;
export const ClusterNodeList = Type.Object({ nodes: Type.Array(ClusterNode) });
export type ClusterNodeList = Static<typeof ClusterNodeList>;
export const ClusterNodeParams = Type.Object({
  node: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$', description: "the node's id or host name" }),
});
