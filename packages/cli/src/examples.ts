// An example for every command, shown at the end of its --help. Kept in one place, by command
// path, so that a test can hold the tree to it (every command has one, and none is left over).
import type { Command } from 'commander';

export const EXAMPLES: Record<string, string[]> = {
  '': ['svc deploy examples/hello', 'svc --json services list'],
  deploy: ['svc deploy                          # the current directory', 'svc deploy examples/hello           # prints the URL once it runs', 'svc deploy . --name api --port 3000 --env LOG_LEVEL=debug'],
  open: ['svc open hello'],
  login: ['svc login --url https://svc.example.com --key "$SVC_KEY"'],
  register: ['svc register --url http://127.0.0.1:8080 --name my-team --email me@example.com'],
  tenant: ['svc tenant'],
  'tenant show': ['svc --json tenant show'],
  'tenant rename': ['svc tenant rename platform-team'],
  'tenant suspend': ['svc tenant suspend --yes'],
  usage: ['svc usage'],
  'usage show': ['svc usage show'],
  'usage metrics': ['svc usage metrics --period daily --since 2026-11-01T00:00:00Z'],
  keys: ['svc keys list'],
  'keys list': ['svc keys list'],
  'keys create': ['svc keys create --name ci --expires-in 86400'],
  'keys revoke': ['svc keys revoke "$KEY_ID"'],
  activity: ['svc activity --action service.created --limit 20'],
  health: ['svc health'],
  admin: ['SVC_ADMIN_TOKEN=... svc admin quotas "$TENANT_ID" --max-services 20'],
  'admin reactivate': ['SVC_ADMIN_TOKEN=... svc admin reactivate "$TENANT_ID"'],
  'admin recover': ['SVC_ADMIN_TOKEN=... svc admin recover owner@example.com'],
  'admin quotas': ['SVC_ADMIN_TOKEN=... svc admin quotas "$TENANT_ID" --max-services 20 --max-databases 10'],
  'admin nodes': ['SVC_ADMIN_TOKEN=... svc admin nodes list'],
  'admin nodes list': ['SVC_ADMIN_TOKEN=... svc admin nodes list --json'],
  'admin nodes drain': ['SVC_ADMIN_TOKEN=... svc admin nodes drain node2'],
  'admin nodes activate': ['SVC_ADMIN_TOKEN=... svc admin nodes activate node2'],
  services: ['svc services list --wide'],
  'services list': ['svc services list', 'svc --wide services list'],
  'services create': ['svc services create web --image nginx:alpine --port 80 --wait', 'svc services create api --image my/api:1 --health-path /healthz', 'svc services create copy --from-snapshot "$SNAPSHOT_ID"'],
  'services show': ['svc services show "$SERVICE_ID"'],
  'services rename': ['svc services rename "$SERVICE_ID" frontend'],
  'services delete': ['svc services delete "$SERVICE_ID"'],
  'services start': ['svc services start "$SERVICE_ID" --wait'],
  'services stop': ['svc services stop "$SERVICE_ID"'],
  'services restart': ['svc services restart "$SERVICE_ID" --wait'],
  'services redeploy': ['svc services redeploy "$SERVICE_ID" --wait'],
  'services reset': ['svc services reset "$SERVICE_ID" --wait'],
  'services scale': ['svc services scale "$SERVICE_ID" 3 --wait'],
  'services deployments': ['svc services deployments "$SERVICE_ID"'],
  'services cancel-deployment': ['svc services cancel-deployment "$SERVICE_ID" "$DEPLOYMENT_ID"'],
  'services metrics': ['svc services metrics "$SERVICE_ID" --period hourly'],
  logs: ['svc logs -f "$SERVICE_ID"', 'svc logs "$SERVICE_ID" --tail 200'],
  domains: ['svc domains add web shop.example.com', 'svc domains list web'],
  'domains list': ['svc domains list web'],
  'domains add': ['svc domains add web shop.example.com'],
  'domains verify': ['svc domains verify web "$DOMAIN_ID"'],
  'domains delete': ['svc domains delete web "$DOMAIN_ID"'],
  snapshots: ['svc snapshots list'],
  'snapshots list': ['svc snapshots list'],
  'snapshots create': ['svc snapshots create "$SERVICE_ID" --name before-upgrade'],
  'snapshots show': ['svc snapshots show "$SNAPSHOT_ID"'],
  'snapshots delete': ['svc snapshots delete "$SNAPSHOT_ID"'],
  env: ['svc env set "$SERVICE_ID" LOG_LEVEL=debug', 'svc env exec "$ENV_ID" -- npm test'],
  'env list': ['svc env list "$SERVICE_ID" --reveal'],
  'env set': ['svc env set "$SERVICE_ID" LOG_LEVEL=debug FEATURE_X=on'],
  'env unset': ['svc env unset "$SERVICE_ID" FEATURE_X'],
  'env exec': ['svc env exec "$ENV_ID" -- npm test', 'echo hi | svc env exec "$ENV_ID" -i -e NAME=value -- sh -c \'cat; echo $NAME\''],
  'env shell': ['svc env shell "$ENV_ID"'],
  'env cp': ['svc env cp ./notes.txt "$ENV_ID":notes/notes.txt', 'svc env cp "$ENV_ID":/workspace/out.log .'],
  'env ls': ['svc env ls "$ENV_ID" /workspace'],
  'env rm': ['svc env rm "$ENV_ID" -r build'],
  builds: ['svc builds create "$SERVICE_ID" --git-url https://github.com/you/app.git --wait'],
  'builds create': ['svc builds create "$SERVICE_ID" --git-url https://github.com/you/app.git --ref main --wait'],
  'builds list': ['svc builds list "$SERVICE_ID"', 'svc builds list --limit 5'],
  'builds show': ['svc builds show "$SERVICE_ID" "$BUILD_ID"'],
  'builds logs': ['svc builds logs -f "$SERVICE_ID" "$BUILD_ID"'],
  'builds cancel': ['svc builds cancel "$SERVICE_ID" "$BUILD_ID"'],
  db: ['svc db create orders --type postgres --wait'],
  'db create': ['svc db create orders --type postgres --wait', 'svc db create cache --type redis'],
  'db list': ['svc db list'],
  'db show': ['svc db show "$DATABASE_ID"'],
  'db url': ['svc db url "$DATABASE_ID"', 'svc db url "$DATABASE_ID" --internal   # as the tenant\'s services reach it'],
  'db delete': ['svc db delete "$DATABASE_ID"'],
  kanban: ['svc kanban create --wait'],
  'kanban create': ['svc kanban create --wait'],
  'kanban show': ['svc kanban show'],
  'kanban admin-token': ['svc kanban admin-token'],
  'kanban delete': ['svc kanban delete'],
  environments: ['svc environments create dev --template default'],
  'environments templates': ['svc environments templates'],
  'environments create': ['svc environments create dev --template default --lease 7200'],
  'environments list': ['svc environments list'],
  'environments show': ['svc environments show "$ENV_ID"'],
  'environments start': ['svc environments start "$ENV_ID"'],
  'environments stop': ['svc environments stop "$ENV_ID"'],
  'environments extend': ['svc environments extend "$ENV_ID" 3600'],
  'environments sync': ['svc environments sync "$ENV_ID" --git-url https://github.com/you/app.git'],
  'environments delete': ['svc environments delete "$ENV_ID"'],
  'environments previews': ['svc environments previews create "$ENV_ID" web 3000'],
  'environments previews list': ['svc environments previews list "$ENV_ID"'],
  'environments previews create': ['svc environments previews create "$ENV_ID" web 3000'],
  'environments previews delete': ['svc environments previews delete "$ENV_ID" "$PREVIEW_ID"'],
  completion: ['svc completion bash > ~/.local/share/bash-completion/completions/svc', 'eval "$(svc completion zsh)"   # in ~/.zshrc, after compinit'],
};

/** The path of a command below svc, canonical names joined by spaces ('' for svc). */
export function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command = cmd; c.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** Every command of the tree, svc itself first. */
export function allCommands(cmd: Command): Command[] {
  return [cmd, ...cmd.commands.flatMap(allCommands)];
}

export function addExamples(program: Command): void {
  for (const cmd of allCommands(program)) {
    const lines = EXAMPLES[commandPath(cmd)];
    if (lines) cmd.addHelpText('after', `\n${lines.length > 1 ? 'Examples' : 'Example'}:\n${lines.map((l) => `  ${l}`).join('\n')}`);
  }
}
