import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

export interface CliConfig {
  url?: string;
  apiKey?: string;
}

/** $SVC_CONFIG, or $XDG_CONFIG_HOME/svc/config.json (by default ~/.config/svc/config.json). */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.SVC_CONFIG ?? join(env.XDG_CONFIG_HOME ?? join(homedir(), '.config'), 'svc', 'config.json');
}

export function readConfig(env: NodeJS.ProcessEnv = process.env): CliConfig {
  try {
    return JSON.parse(readFileSync(configPath(env), 'utf8')) as CliConfig;
  } catch {
    return {};
  }
}

/** Written 0600: it holds an API key. */
export function writeConfig(c: CliConfig, env: NodeJS.ProcessEnv = process.env): string {
  const p = configPath(env);
  mkdirSync(dirname(p), { recursive: true, mode: 0o700 });
  writeFileSync(p, `${JSON.stringify(c, null, 2)}\n`, { mode: 0o600 });
  chmodSync(p, 0o600);
  return p;
}

/** SVC_URL and SVC_API_KEY override the file. */
export function effectiveConfig(env: NodeJS.ProcessEnv = process.env): Required<Pick<CliConfig, 'url'>> & CliConfig {
  const file = readConfig(env);
  return { url: env.SVC_URL ?? file.url ?? 'http://127.0.0.1:8080', apiKey: env.SVC_API_KEY ?? file.apiKey };
}
