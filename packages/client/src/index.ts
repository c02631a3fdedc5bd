// A typed client for svc's HTTP API. Request and response types come from @svc/contract, the
// same schemas the server validates with. Used by the CLI and by the integration tests.
import type {
  ClusterNode,
  ClusterNodeList,
  Domain,
  SourceUpload,
  CreateEnvironmentRequest,
  CreatePreviewRequest,
  Environment,
  ExecEvent,
  ExecRequest,
  ExecResult,
  ExecSignal,
  ExecSignalResult,
  FileInfo,
  FileList,
  Preview,
  SyncRequest,
  SyncResult,
  Template,
  KanbanAdminToken,
  KanbanBoard,
  ConnectionString,
  CreateDatabaseRequest,
  DatabaseRecord,
  Build,
  CreateBuildRequest,
  CreateBuildResponse,
  Snapshot,
  CreateServiceRequest,
  Deployment,
  LifecycleResponse,
  Service,
  ActivityEntry,
  ActivityQuery,
  CreatedKey,
  CreateKeyRequest,
  HealthBody,
  HealthDetail,
  KeyInfo,
  QuotaPatchRequest,
  QuotaRecord,
  ReactivateResponse,
  RecoverResponse,
  RegisterRequest,
  RegisterResponse,
  RevokedKey,
  Tenant,
  TenantListQuery,
  TenantSummary,
  TenantUsage,
  WebSession,
  EndedSession,
  ValidateTokenResponse,
  MetricsQuery,
  TenantMetricsQuery,
  UsageRollup,
} from '@svc/contract';

export type * from '@svc/contract';
/** The files API's cap, both ways (the CLI checks a local file against it before reading it). */
// From the module without TypeBox: a client's start does not load the schemas.
export { CSRF_HEADER, EXEC_ID_HEADER, FILE_MAX_BYTES, LEASE_MAX_S, REPLICAS_MAX, WAIT_MAX_S, SNAPSHOTS_PER_TENANT_MAX, SOURCE_ARCHIVE_MAX_BYTES, SOURCE_UNPACKED_MAX_BYTES } from '@svc/contract/limits';
import { EXEC_ID_HEADER } from '@svc/contract/limits';

/** What the client reads of an answer's headers (fetch's Headers has it). */
export interface AnswerHeaders {
  get(name: string): string | null;
  getSetCookie(): string[];
}

/** What the client reads of an answer: fetch's Response has it. */
export interface Answer {
  status: number;
  headers: AnswerHeaders;
  /** Read at most once, and not after text(). */
  body: ReadableStream<Uint8Array> | null;
  text(): Promise<string>;
}

/** One request as the client sends it. */
export interface Outgoing {
  method: string;
  headers: Record<string, string>;
  body?: string | Uint8Array<ArrayBuffer>;
  signal?: AbortSignal;
}

/**
 * How requests go out: fetch by default (browsers, tests). The CLI passes one over node:http
 * (its http-transport.ts), because fetch's first use in a process costs 40-80 ms and each CLI
 * command is a new process.
 */
export type Transport = (url: URL, req: Outgoing) => Promise<Answer>;

/** An answer other than 2xx, carrying the API's {error} message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: AnswerHeaders,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The API's {error} message, or the raw text of an answer without one. */
function errorMessage(body: unknown, text: string): string {
  return typeof body === 'object' && body !== null && 'error' in body ? String(body.error) : text;
}

export interface RawResponse<T = unknown> {
  status: number;
  headers: AnswerHeaders;
  body: T;
  text: string;
}

export interface RequestOptions {
  body?: unknown;
  /** Sent as is (not JSON-encoded): for malformed-body tests and raw payloads. */
  rawBody?: string | Uint8Array<ArrayBuffer>;
  query?: Record<string, string | number | boolean | undefined>;
  headers?: Record<string, string>;
  /** false: no Authorization header even when the client has a key. */
  auth?: boolean;
  signal?: AbortSignal;
}

/** What the client saw for one request: tests check every answer against the OpenAPI document. */
export interface ObservedResponse {
  method: string;
  /** The path without the query string. */
  path: string;
  status: number;
  contentType: string;
  /** Parsed JSON, or the text (null for a stream). */
  body: unknown;
}

export interface ClientOptions {
  baseUrl: string;
  /** Called with every answer (tests). */
  observe?: (r: ObservedResponse) => void;
  /** fetch when not given. */
  transport?: Transport;
  apiKey?: string;
  /** Operator credential, sent as X-Admin-Token on operator routes. */
  adminToken?: string;
  /** Sent as X-Bootstrap-Token on registration. */
  bootstrapToken?: string;
  /** Sent with every request (the dashboard's X-CSRF-Token). */
  headers?: Record<string, string>;
}

export class SvcClient {
  readonly baseUrl: string;
  apiKey: string | undefined;
  adminToken: string | undefined;
  bootstrapToken: string | undefined;
  /** Sent with every request; a request's own headers win. */
  headers: Record<string, string>;
  private readonly observe: ClientOptions['observe'];
  private readonly transport: Transport;

  constructor(opts: ClientOptions) {
    this.observe = opts.observe;
    this.transport = opts.transport ?? ((url, req) => fetch(url, req));
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.apiKey = opts.apiKey;
    this.adminToken = opts.adminToken;
    this.bootstrapToken = opts.bootstrapToken;
    this.headers = { ...opts.headers };
  }

  /** A copy of this client that authenticates with another key. */
  withKey(apiKey: string): SvcClient {
    return new SvcClient({ baseUrl: this.baseUrl, apiKey, adminToken: this.adminToken, bootstrapToken: this.bootstrapToken, observe: this.observe, transport: this.transport, headers: this.headers });
  }

  private send(method: string, path: string, o: RequestOptions): Promise<Answer> {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(o.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { ...this.headers, ...o.headers };
    if (o.auth !== false && this.apiKey && !('authorization' in headers)) headers.authorization = `Bearer ${this.apiKey}`;
    let body: string | Uint8Array<ArrayBuffer> | undefined = o.rawBody;
    if (o.body !== undefined) body = JSON.stringify(o.body);
    if (body !== undefined && !('content-type' in headers)) headers['content-type'] = 'application/json';
    return this.transport(url, { method, headers, body, signal: o.signal });
  }

  /** Any request, any answer: the status is not checked. */
  async raw<T = unknown>(method: string, path: string, o: RequestOptions = {}): Promise<RawResponse<T>> {
    const res = await this.send(method, path, o);
    const text = await res.text();
    const contentType = res.headers.get('content-type') ?? '';
    let parsed: unknown = text;
    if (contentType.includes('json') && text !== '') parsed = JSON.parse(text);
    this.observe?.({ method, path: path.split('?')[0] ?? path, status: res.status, contentType, body: parsed });
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }

  /**
   * A request whose answer is read as it comes (followed logs): the body stream once the status
   * is 2xx, else ApiError with the API's message.
   */
  async stream(path: string, o: RequestOptions = {}, method = 'GET'): Promise<ReadableStream<Uint8Array>> {
    return (await this.streamAnswer(path, o, method)).body;
  }

  /** stream(), with the answer's headers. */
  async streamAnswer(path: string, o: RequestOptions = {}, method = 'GET'): Promise<{ body: ReadableStream<Uint8Array>; headers: AnswerHeaders }> {
    const res = await this.send(method, path, o);
    const contentType = res.headers.get('content-type') ?? '';
    if (res.status < 200 || res.status >= 300 || !res.body) {
      const text = await res.text();
      const body: unknown = contentType.includes('json') && text !== '' ? JSON.parse(text) : text;
      this.observe?.({ method, path, status: res.status, contentType, body });
      throw new ApiError(res.status, errorMessage(body, text), res.headers);
    }
    this.observe?.({ method, path, status: res.status, contentType, body: null });
    return { body: res.body, headers: res.headers };
  }

  /** A request that must succeed: a non-2xx answer throws ApiError with the API's message. */
  async call<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const r = await this.raw<T>(method, path, o);
    if (r.status < 200 || r.status >= 300) throw new ApiError(r.status, errorMessage(r.body, r.text), r.headers);
    return r.body;
  }

  private operatorHeaders(): Record<string, string> {
    if (this.adminToken) return { 'x-admin-token': this.adminToken };
    if (this.bootstrapToken) return { 'x-bootstrap-token': this.bootstrapToken };
    return {};
  }

  // System
  health(): Promise<HealthBody> {
    return this.call('GET', '/v1/system/health', { auth: false });
  }
  healthDetailed(fresh = false): Promise<HealthDetail> {
    return this.call('GET', '/v1/system/health/detailed', { query: { fresh: fresh || undefined } });
  }
  validateBootstrapToken(token: string): Promise<ValidateTokenResponse> {
    return this.call('POST', '/v1/system/bootstrap-token/validate', { body: { token }, auth: false });
  }

  // Tenants
  register(req: RegisterRequest): Promise<RegisterResponse> {
    const headers: Record<string, string> = this.bootstrapToken ? { 'x-bootstrap-token': this.bootstrapToken } : {};
    return this.call('POST', '/v1/tenants/register', { body: req, headers, auth: false });
  }
  tenant(): Promise<Tenant> {
    return this.call('GET', '/v1/tenant');
  }
  renameTenant(name: string): Promise<Tenant> {
    return this.call('PATCH', '/v1/tenant', { body: { name } });
  }
  suspendTenant(): Promise<Tenant> {
    return this.call('DELETE', '/v1/tenant');
  }
  usage(): Promise<TenantUsage> {
    return this.call('GET', '/v1/tenant/usage');
  }
  /** Usage rollups: the tenant's totals, or one service's with service_id. */
  usageMetrics(q: TenantMetricsQuery = {}): Promise<UsageRollup[]> {
    return this.call('GET', '/v1/tenant/usage/metrics', { query: { ...q } });
  }
  /** Operator: the cluster's nodes (--runtime swarm). */
  async listClusterNodes(): Promise<ClusterNode[]> {
    return (await this.call<ClusterNodeList>('GET', '/v1/system/nodes', { headers: this.operatorHeaders(), auth: false })).nodes;
  }
  /** Operator: drain a node (its tasks move to the others), or make it take tasks again. */
  setClusterNodeAvailability(node: string, availability: 'drain' | 'active'): Promise<ClusterNode> {
    const action = availability === 'drain' ? 'drain' : 'activate';
    return this.call('POST', `/v1/system/nodes/${encodeURIComponent(node)}/${action}`, { headers: this.operatorHeaders(), auth: false });
  }
  reactivateTenant(tenantId: string): Promise<ReactivateResponse> {
    return this.call('POST', `/v1/tenants/${encodeURIComponent(tenantId)}/reactivate`, { headers: this.operatorHeaders(), auth: false });
  }
  listTenants(q: TenantListQuery = {}): Promise<TenantSummary[]> {
    return this.call('GET', '/v1/tenants', { query: q, headers: this.operatorHeaders(), auth: false });
  }
  tenantQuotas(tenantId: string): Promise<QuotaRecord> {
    return this.call('GET', `/v1/tenants/${encodeURIComponent(tenantId)}/quotas`, { headers: this.operatorHeaders(), auth: false });
  }
  /** The health detail read with the operator token instead of a key (the operator's pages). */
  healthDetailedAsOperator(fresh = false): Promise<HealthDetail> {
    return this.call('GET', '/v1/system/health/detailed', { query: { fresh: fresh || undefined }, headers: this.operatorHeaders(), auth: false });
  }
  patchQuotas(tenantId: string, patch: QuotaPatchRequest): Promise<QuotaRecord> {
    return this.call('PATCH', `/v1/tenants/${encodeURIComponent(tenantId)}/quotas`, {
      body: patch,
      headers: this.operatorHeaders(),
      auth: false,
    });
  }

  // Dashboard sessions (the browser keeps the cookie; the answer's csrf_token goes in headers)
  createSession(apiKey: string): Promise<WebSession> {
    return this.call('POST', '/v1/auth/session', { body: { api_key: apiKey }, auth: false });
  }
  session(): Promise<WebSession> {
    return this.call('GET', '/v1/auth/session');
  }
  endSession(): Promise<EndedSession> {
    return this.call('DELETE', '/v1/auth/session');
  }

  // API keys
  createKey(req: CreateKeyRequest = {}): Promise<CreatedKey> {
    return this.call('POST', '/v1/auth/keys', { body: req });
  }
  listKeys(): Promise<KeyInfo[]> {
    return this.call('GET', '/v1/auth/keys');
  }
  revokeKey(keyId: string): Promise<RevokedKey> {
    return this.call('DELETE', `/v1/auth/keys/${encodeURIComponent(keyId)}`);
  }
  recover(email: string): Promise<RecoverResponse> {
    return this.call('POST', '/v1/auth/recover', { body: { email }, headers: this.operatorHeaders(), auth: false });
  }

  // Services
  createService(req: CreateServiceRequest): Promise<Service> {
    return this.call('POST', '/v1/services', { body: req });
  }
  listServices(q: { limit?: number; offset?: number } = {}): Promise<Service[]> {
    return this.call('GET', '/v1/services', { query: q });
  }
  /** `wait` (beyond the spec, seconds): while it deploys, answered once the deploy ends or the time is up. */
  service(id: string, q: { wait?: number } = {}): Promise<Service> {
    return this.call('GET', `/v1/services/${encodeURIComponent(id)}`, { query: q });
  }
  renameService(id: string, name: string): Promise<Service> {
    return this.call('PATCH', `/v1/services/${encodeURIComponent(id)}`, { body: { name } });
  }
  async deleteService(id: string): Promise<void> {
    await this.call('DELETE', `/v1/services/${encodeURIComponent(id)}`);
  }
  /** Beyond the spec: how many replicas run (above 1 on a swarm only). */
  scaleService(id: string, replicas: number): Promise<LifecycleResponse> {
    return this.call('POST', `/v1/services/${encodeURIComponent(id)}/scale`, { body: { replicas } });
  }
  serviceAction(id: string, action: 'start' | 'stop' | 'restart' | 'redeploy' | 'reset'): Promise<LifecycleResponse> {
    return this.call('POST', `/v1/services/${encodeURIComponent(id)}/${action}`);
  }
  deployments(id: string, q: { limit?: number; offset?: number } = {}): Promise<Deployment[]> {
    return this.call('GET', `/v1/services/${encodeURIComponent(id)}/deployments`, { query: q });
  }
  cancelDeployment(id: string, deploymentId: string): Promise<Deployment> {
    return this.call('POST', `/v1/services/${encodeURIComponent(id)}/deployments/${encodeURIComponent(deploymentId)}/cancel`);
  }
  /** Logs as text (tail only; followServiceLogs streams). */
  serviceLogs(id: string, tail?: number): Promise<string> {
    return this.call('GET', `/v1/services/${encodeURIComponent(id)}/logs`, { query: { tail } });
  }
  /** The log as it grows, until the service's container ends or the signal aborts. */
  followServiceLogs(id: string, tail?: number, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    return this.stream(`/v1/services/${encodeURIComponent(id)}/logs`, { query: { follow: true, tail }, signal });
  }
  serviceEnv(id: string, reveal = false): Promise<Record<string, string>> {
    return this.call('GET', `/v1/services/${encodeURIComponent(id)}/env`, { query: { reveal: reveal || undefined } });
  }
  setServiceEnv(id: string, vars: Record<string, string>): Promise<Record<string, string>> {
    return this.call('POST', `/v1/services/${encodeURIComponent(id)}/env`, { body: vars });
  }
  async unsetServiceEnv(id: string, key: string): Promise<void> {
    await this.call('DELETE', `/v1/services/${encodeURIComponent(id)}/env/${encodeURIComponent(key)}`);
  }

  serviceMetrics(id: string, q: MetricsQuery = {}): Promise<UsageRollup[]> {
    return this.call('GET', `/v1/services/${encodeURIComponent(id)}/metrics`, { query: { ...q } });
  }

  // Custom domains (beyond the spec)
  addDomain(serviceId: string, hostname: string): Promise<Domain> {
    return this.call('POST', `/v1/services/${encodeURIComponent(serviceId)}/domains`, { body: { hostname } });
  }
  listDomains(serviceId: string): Promise<Domain[]> {
    return this.call('GET', `/v1/services/${encodeURIComponent(serviceId)}/domains`);
  }
  domain(serviceId: string, id: string): Promise<Domain> {
    return this.call('GET', `/v1/services/${encodeURIComponent(serviceId)}/domains/${encodeURIComponent(id)}`);
  }
  verifyDomain(serviceId: string, id: string): Promise<Domain> {
    return this.call('POST', `/v1/services/${encodeURIComponent(serviceId)}/domains/${encodeURIComponent(id)}/verify`);
  }
  async removeDomain(serviceId: string, id: string): Promise<void> {
    await this.call('DELETE', `/v1/services/${encodeURIComponent(serviceId)}/domains/${encodeURIComponent(id)}`);
  }

  // Snapshots
  createSnapshot(serviceId: string, name: string, description?: string): Promise<Snapshot> {
    return this.call('POST', `/v1/services/${encodeURIComponent(serviceId)}/snapshots`, { body: { name, description } });
  }
  listSnapshots(q: { limit?: number; offset?: number } = {}): Promise<Snapshot[]> {
    return this.call('GET', '/v1/snapshots', { query: q });
  }
  snapshot(id: string): Promise<Snapshot> {
    return this.call('GET', `/v1/snapshots/${encodeURIComponent(id)}`);
  }
  async deleteSnapshot(id: string): Promise<void> {
    await this.call('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }
  serviceFromSnapshot(snapshotId: string, name: string, replicas?: number): Promise<Service> {
    return this.call('POST', '/v1/services', { query: { from_snapshot: snapshotId }, body: { name, ...(replicas === undefined ? {} : { replicas }) } });
  }

  // Builds
  createBuild(serviceId: string, req: CreateBuildRequest): Promise<CreateBuildResponse> {
    return this.call('POST', `/v1/services/${encodeURIComponent(serviceId)}/builds`, { body: req });
  }
  /**
   * Uploads a source archive (a tar, gzipped or not, with a Dockerfile at its root) to build from;
   * with `build`, its build is queued in the same request and answered under `build`.
   */
  uploadSource(serviceId: string, archive: Uint8Array<ArrayBuffer>, q: { build?: boolean } = {}): Promise<SourceUpload> {
    return this.call('POST', `/v1/services/${encodeURIComponent(serviceId)}/sources`, { rawBody: archive, headers: { 'content-type': 'application/gzip' }, query: { build: q.build || undefined } });
  }
  builds(serviceId: string, q: { limit?: number; offset?: number } = {}): Promise<Build[]> {
    return this.call('GET', `/v1/services/${encodeURIComponent(serviceId)}/builds`, { query: q });
  }
  tenantBuilds(limit?: number): Promise<Build[]> {
    return this.call('GET', '/v1/builds', { query: { limit } });
  }
  /** `wait` (beyond the spec, seconds): while it is queued or running, answered once it ends or the time is up. */
  build(serviceId: string, buildId: string, q: { wait?: number } = {}): Promise<Build> {
    return this.call('GET', `/v1/services/${encodeURIComponent(serviceId)}/builds/${encodeURIComponent(buildId)}`, { query: q });
  }
  buildLogs(serviceId: string, buildId: string): Promise<string> {
    return this.call('GET', `/v1/services/${encodeURIComponent(serviceId)}/builds/${encodeURIComponent(buildId)}/logs`);
  }
  /** The build's log as it is written, until the build ends. */
  followBuildLogs(serviceId: string, buildId: string, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    return this.stream(`/v1/services/${encodeURIComponent(serviceId)}/builds/${encodeURIComponent(buildId)}/logs`, { query: { follow: true }, signal });
  }
  cancelBuild(serviceId: string, buildId: string): Promise<{ status: 'cancelled' }> {
    return this.call('DELETE', `/v1/services/${encodeURIComponent(serviceId)}/builds/${encodeURIComponent(buildId)}`);
  }

  // Databases
  createDatabase(req: CreateDatabaseRequest): Promise<DatabaseRecord> {
    return this.call('POST', '/v1/databases', { body: req });
  }
  databases(q: { limit?: number; offset?: number } = {}): Promise<DatabaseRecord[]> {
    return this.call('GET', '/v1/databases', { query: q });
  }
  database(id: string): Promise<DatabaseRecord> {
    return this.call('GET', `/v1/databases/${encodeURIComponent(id)}`);
  }
  connectionString(id: string): Promise<ConnectionString> {
    return this.call('GET', `/v1/databases/${encodeURIComponent(id)}/connection-string`);
  }
  async deleteDatabase(id: string): Promise<void> {
    await this.call('DELETE', `/v1/databases/${encodeURIComponent(id)}`);
  }

  // Kanban: one board per tenant
  createKanban(): Promise<KanbanBoard> {
    return this.call('POST', '/v1/kanban');
  }
  kanban(): Promise<KanbanBoard> {
    return this.call('GET', '/v1/kanban');
  }
  kanbanAdminToken(): Promise<KanbanAdminToken> {
    return this.call('GET', '/v1/kanban/admin-token');
  }
  async deleteKanban(): Promise<void> {
    await this.call('DELETE', '/v1/kanban');
  }

  // Environments
  templates(): Promise<Template[]> {
    return this.call('GET', '/v1/environments/templates');
  }
  template(id: string): Promise<Template> {
    return this.call('GET', `/v1/environments/templates/${encodeURIComponent(id)}`);
  }
  createEnvironment(req: CreateEnvironmentRequest): Promise<Environment> {
    return this.call('POST', '/v1/environments', { body: req });
  }
  environments(q: { limit?: number; offset?: number } = {}): Promise<Environment[]> {
    return this.call('GET', '/v1/environments', { query: q });
  }
  environment(id: string): Promise<Environment> {
    return this.call('GET', `/v1/environments/${encodeURIComponent(id)}`);
  }
  async deleteEnvironment(id: string): Promise<void> {
    await this.call('DELETE', `/v1/environments/${encodeURIComponent(id)}`);
  }
  startEnvironment(id: string): Promise<Environment> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/start`);
  }
  stopEnvironment(id: string): Promise<Environment> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/stop`);
  }
  extendLease(id: string, durationSeconds: number): Promise<Environment> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/lease`, { body: { duration_seconds: durationSeconds } });
  }
  exec(id: string, req: ExecRequest): Promise<ExecResult> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/exec`, { body: req });
  }
  /** exec with `stream: true`: the events as they come (the last is `exit`, or `error` when the outcome is unknown). */
  async *execStream(id: string, req: Omit<ExecRequest, 'stream'>, signal?: AbortSignal): AsyncGenerator<ExecEvent> {
    yield* (await this.startExec(id, req, signal)).events;
  }
  /**
   * A streamed exec, once its command runs: its events, and the id signalExec reaches it by
   * while it runs (null when it ran through the engine).
   */
  async startExec(id: string, req: Omit<ExecRequest, 'stream'>, signal?: AbortSignal): Promise<{ execId: string | null; events: AsyncGenerator<ExecEvent> }> {
    const { body, headers } = await this.streamAnswer(`/v1/environments/${encodeURIComponent(id)}/exec`, { body: { ...req, stream: true }, signal }, 'POST');
    return { execId: headers.get(EXEC_ID_HEADER), events: ndjsonEvents(body) };
  }
  /** Sends a signal to the process group of a streamed exec that still runs. */
  signalExec(id: string, execId: string, signal: ExecSignal): Promise<ExecSignalResult> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/exec/${encodeURIComponent(execId)}/signal`, { body: { signal } });
  }
  /** A file of the environment: path absolute or relative to /workspace. */
  statFile(id: string, path: string): Promise<FileInfo> {
    return this.call('GET', `/v1/environments/${encodeURIComponent(id)}/files/stat`, { query: { path } });
  }
  listFiles(id: string, path: string): Promise<FileList> {
    return this.call('GET', `/v1/environments/${encodeURIComponent(id)}/files/list`, { query: { path } });
  }
  /** A file's content as it comes (at most 100 MiB). */
  readFile(id: string, path: string, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    return this.stream(`/v1/environments/${encodeURIComponent(id)}/files`, { query: { path }, signal });
  }
  writeFile(id: string, path: string, content: Uint8Array<ArrayBuffer> | string, mode?: string): Promise<FileInfo> {
    return this.call('PUT', `/v1/environments/${encodeURIComponent(id)}/files`, {
      query: { path, mode },
      rawBody: content,
      headers: { 'content-type': 'application/octet-stream' },
    });
  }
  async removeFile(id: string, path: string, recursive = false): Promise<void> {
    await this.call('DELETE', `/v1/environments/${encodeURIComponent(id)}/files`, { query: { path, recursive: recursive || undefined } });
  }
  /**
   * An interactive terminal in the environment: a WebSocket (binary frames in and out, text
   * frames for resize and exit; see the route's summary). Node's WebSocket (undici) takes request
   * headers as an extension of the standard constructor, which is how the key goes with it.
   */
  terminal(id: string, size: { cols: number; rows: number }): WebSocket {
    const url = new URL(`${this.baseUrl}/v1/environments/${encodeURIComponent(id)}/terminal`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('cols', String(size.cols));
    url.searchParams.set('rows', String(size.rows));
    const init = { headers: this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {} };
    // The client's own build knows the DOM's constructor (protocols only); Node's types, which
    // the linter reads, know undici's init as well.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- see above
    const socket = new WebSocket(url, init as unknown as string[]);
    socket.binaryType = 'arraybuffer';
    return socket;
  }
  sync(id: string, req: SyncRequest): Promise<SyncResult> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/sync`, { body: req });
  }
  createPreview(id: string, req: CreatePreviewRequest): Promise<Preview> {
    return this.call('POST', `/v1/environments/${encodeURIComponent(id)}/previews`, { body: req });
  }
  previews(id: string): Promise<Preview[]> {
    return this.call('GET', `/v1/environments/${encodeURIComponent(id)}/previews`);
  }
  async deletePreview(id: string, previewId: string): Promise<void> {
    await this.call('DELETE', `/v1/environments/${encodeURIComponent(id)}/previews/${encodeURIComponent(previewId)}`);
  }

  // Activity
  activity(q: ActivityQuery = {}): Promise<ActivityEntry[]> {
    return this.call('GET', '/v1/activity', { query: { ...q } });
  }
}

/** The events of an NDJSON answer, a line each. */
async function* ndjsonEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ExecEvent> {
  const decoder = new TextDecoder();
  let pending = '';
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let newline: number;
    while ((newline = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (line.trim() !== '') yield JSON.parse(line) as ExecEvent;
    }
  }
}
