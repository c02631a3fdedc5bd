import { Type, type Static } from 'typebox';
import { Pagination, UnixSeconds } from './common.js';
import { EXEC_ID_HEADER } from './limits.js';

export const TEMPLATE_IDS = ['default', 'node', 'python', 'go'] as const;
export type TemplateId = (typeof TEMPLATE_IDS)[number];

export const ENVIRONMENT_NAME_PATTERN = '^[a-zA-Z][a-zA-Z0-9_-]*$';
export const PREVIEW_NAME_PATTERN = '^[a-zA-Z0-9][a-zA-Z0-9-]{0,62}$';
/** DECISIONS.md: exec timeout default 60 s, at most 300 s; each stream capped at 1 MiB. */
export const EXEC_TIMEOUT_DEFAULT_S = 60;
export const EXEC_TIMEOUT_MAX_S = 300;
export const EXEC_OUTPUT_MAX_BYTES = 1024 * 1024;
/** stdin given with an exec (beyond the spec): text, within the API's 1 MiB request body. */
export const EXEC_STDIN_MAX_BYTES = 512 * 1024;
export { FILE_MAX_BYTES } from './limits.js';
export const LEASE_DEFAULT_S = 3600;
/** Longest lease one call may ask for: 30 days. */
export { LEASE_MAX_S } from './limits.js';
import { LEASE_MAX_S } from './limits.js';

export const Template = Type.Object({
  id: Type.String({ description: 'default, node, python or go' }),
  description: Type.String(),
  image: Type.String({ description: "the operator's image for it (--env-image-<id>)" }),
  resources: Type.Object({ memory_mb: Type.Integer(), cpu_cores: Type.Number(), pids: Type.Integer() }),
});
export type Template = Static<typeof Template>;
export const TemplateList = Type.Array(Template);
export const TemplateParams = Type.Object({ templateID: Type.String({ minLength: 1, maxLength: 64 }) });

export const CreateEnvironmentRequest = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 63, pattern: ENVIRONMENT_NAME_PATTERN }),
  template_id: Type.String({ description: 'default, node, python or go (400 otherwise)' }),
  lease_duration_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: LEASE_MAX_S, description: `default ${LEASE_DEFAULT_S}` })),
});
export type CreateEnvironmentRequest = Static<typeof CreateEnvironmentRequest>;

export const Environment = Type.Object({
  id: Type.String(),
  name: Type.String(),
  template_id: Type.String(),
  image: Type.String(),
  status: Type.String({ description: 'creating, running, stopped or expired (stopped at lease expiry; the workspace is kept 24 h). On a Docker Swarm an environment is pinned to the node its workspace is on: while that node is away it is stopped, last_error naming the node, and runs there again once the node is back' }),
  lease_expires_at: UnixSeconds,
  removal_at: Type.Union([UnixSeconds, Type.Null()], { description: 'expired: when the workspace is removed (24 h after expiry)' }),
  workspace: Type.String({ description: 'where the workspace volume is mounted: /workspace' }),
  last_error: Type.Union([Type.String(), Type.Null()]),
  created_at: UnixSeconds,
  updated_at: UnixSeconds,
});
export type Environment = Static<typeof Environment>;
export const EnvironmentList = Type.Array(Environment);
export const EnvironmentListQuery = Type.Object(Pagination);
export const EnvironmentParams = Type.Object({ envID: Type.String({ minLength: 1, maxLength: 64 }) });

export const LeaseRequest = Type.Object({
  duration_seconds: Type.Integer({ minimum: 1, maximum: LEASE_MAX_S, description: 'the lease runs this long from now' }),
});
export type LeaseRequest = Static<typeof LeaseRequest>;

export const ExecRequest = Type.Object({
  command: Type.Array(Type.String({ maxLength: 65536 }), { minItems: 1, maxItems: 1024, description: 'argv, run as given: no shell is added' }),
  work_dir: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, description: 'default /workspace' })),
  timeout: Type.Optional(Type.Integer({ minimum: 1, maximum: EXEC_TIMEOUT_MAX_S, description: `seconds; default ${EXEC_TIMEOUT_DEFAULT_S}` })),
  // Beyond the spec (additive): environment variables, stdin and a streamed answer.
  env: Type.Optional(
    Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$', maxLength: 256 }), Type.String({ maxLength: 65536 }), {
      maxProperties: 100,
      description: "variables added to the environment's own for this command (beyond the spec)",
    }),
  ),
  stdin: Type.Optional(Type.String({ maxLength: EXEC_STDIN_MAX_BYTES, description: 'text given to the command on its stdin, which then closes (default: an empty stdin; beyond the spec)' })),
  stream: Type.Optional(
    Type.Boolean({
      description: 'answer with application/x-ndjson, one ExecEvent per line as the output comes (stdout and stderr pieces, then one exit event, or one error event when the outcome cannot be known); the same caps and timeout hold (beyond the spec)',
    }),
  ),
});
export type ExecRequest = Static<typeof ExecRequest>;

export { EXEC_ID_HEADER } from './limits.js';
export const EXEC_SIGNALS = ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGKILL', 'SIGUSR1', 'SIGUSR2', 'SIGTERM'] as const;
export type ExecSignal = (typeof EXEC_SIGNALS)[number];
export const ExecParams = Type.Object({
  envID: Type.String({ minLength: 1, maxLength: 64 }),
  execID: Type.String({ pattern: '^[a-z0-9]{1,64}$', description: `the id a streamed exec's \`${EXEC_ID_HEADER}\` header gave` }),
});
const ExecSignalName = Type.Union(
  [Type.Literal('SIGHUP'), Type.Literal('SIGINT'), Type.Literal('SIGQUIT'), Type.Literal('SIGKILL'), Type.Literal('SIGUSR1'), Type.Literal('SIGUSR2'), Type.Literal('SIGTERM')],
  { description: 'sent to the command\'s process group (what it started too); SIGSTOP and SIGCONT are not offered' },
);
export const ExecSignalRequest = Type.Object({ signal: ExecSignalName });
export type ExecSignalRequest = Static<typeof ExecSignalRequest>;
export const ExecSignalResult = Type.Object({
  exec_id: Type.String(),
  signal: ExecSignalName,
  delivered: Type.Boolean({ description: 'the signal reached the running command (what it does with it is the command\'s own)' }),
});
export type ExecSignalResult = Static<typeof ExecSignalResult>;

/** One line of a streamed exec. */
export const ExecEvent = Type.Union([
  Type.Object({ type: Type.Literal('stdout'), data: Type.String({ description: 'output as it came (UTF-8 text)' }) }),
  Type.Object({ type: Type.Literal('stderr'), data: Type.String() }),
  Type.Object({
    type: Type.Literal('exit'),
    exit_code: Type.Integer(),
    truncated: Type.Boolean({ description: 'stdout or stderr went past 1 MiB; what followed was not sent' }),
    timed_out: Type.Boolean(),
    duration_ms: Type.Integer(),
  }),
  Type.Object({ type: Type.Literal('error'), error: Type.String({ description: 'the stream broke before the command ended; its outcome is unknown' }) }),
]);
export type ExecEvent = Static<typeof ExecEvent>;

export const ExecResult = Type.Object({
  exit_code: Type.Integer(),
  stdout: Type.String(),
  stderr: Type.String(),
  truncated: Type.Boolean({ description: 'stdout or stderr went past 1 MiB and was cut there' }),
  timed_out: Type.Boolean({ description: 'killed at the timeout' }),
  duration_ms: Type.Integer(),
});
export type ExecResult = Static<typeof ExecResult>;

export const SyncRequest = Type.Object({
  git_url: Type.String({ minLength: 9, maxLength: 2048, pattern: '^https://', description: 'https:// only' }),
  git_ref: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: "branch, tag or commit; default the remote's default branch" })),
});
export type SyncRequest = Static<typeof SyncRequest>;

export const SyncResult = Type.Object({
  path: Type.String({ description: 'where the checkout is: /workspace/<repository name>' }),
  commit: Type.String({ description: 'the commit checked out' }),
  duration_ms: Type.Integer(),
});
export type SyncResult = Static<typeof SyncResult>;

export const CreatePreviewRequest = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 63, pattern: PREVIEW_NAME_PATTERN }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
});
export type CreatePreviewRequest = Static<typeof CreatePreviewRequest>;

export const Preview = Type.Object({
  id: Type.String(),
  environment_id: Type.String(),
  name: Type.String(),
  port: Type.Integer(),
  url: Type.Union([Type.String(), Type.Null()], { description: "through svc's proxy; null when svcd runs without --proxy-listen" }),
  created_at: UnixSeconds,
});
export type Preview = Static<typeof Preview>;
export const PreviewList = Type.Array(Preview);
// The spec writes {id} in the preview paths and {envID} elsewhere: one segment, one name here.
export const PreviewParams = Type.Object({ envID: Type.String({ minLength: 1, maxLength: 64 }), previewID: Type.String({ minLength: 1, maxLength: 64 }) });

// The files API (beyond the spec): a running environment's files, read and written through its agent.
export const FileQuery = Type.Object({
  path: Type.String({ minLength: 1, maxLength: 4096, description: 'absolute, or relative to /workspace' }),
});
export type FileQuery = Static<typeof FileQuery>;
export const FileWriteQuery = Type.Object({
  path: FileQuery.properties.path,
  mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$', description: 'octal permissions; default 0644' })),
});
export type FileWriteQuery = Static<typeof FileWriteQuery>;
export const FileDeleteQuery = Type.Object({
  path: FileQuery.properties.path,
  recursive: Type.Optional(Type.Boolean({ description: 'a directory and everything in it (a directory with entries is 409 without it)' })),
});
export type FileDeleteQuery = Static<typeof FileDeleteQuery>;
export const FileInfo = Type.Object({
  path: Type.String(),
  name: Type.String(),
  type: Type.Union([Type.Literal('file'), Type.Literal('directory'), Type.Literal('symlink'), Type.Literal('other')]),
  size: Type.Integer(),
  mode: Type.String({ description: 'octal permissions' }),
  modified_at: UnixSeconds,
  link_target: Type.Optional(Type.String()),
});
export type FileInfo = Static<typeof FileInfo>;
export const FileList = Type.Object({
  path: Type.String(),
  entries: Type.Array(FileInfo, { description: 'sorted by name; links are not followed' }),
  truncated: Type.Boolean({ description: 'the directory has more than 10,000 entries; the first 10,000 (in the directory\'s order) are listed' }),
});
export type FileList = Static<typeof FileList>;
