// Secrets at rest (service env values, snapshots' env, database passwords, board tokens, and every
// response kept for idempotent replay, since some carry API key secrets) are sealed with
// AES-256-GCM under one master key: SVC_MASTER_KEY (64 hex characters or 44 base64), or a key
// generated once into the data dir (mode 0600). Several svcd on one PostgreSQL store must share
// SVC_MASTER_KEY.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const VERSION = 'v1';

declare const sealedBrand: unique symbol;
/**
 * Text produced by Sealer.seal. Store methods that hold secrets take this type, so passing them
 * a plaintext string is a compile error rather than a secret on disk.
 */
export type SealedText = string & { readonly [sealedBrand]: true };

/** A sealed value that does not open: not sealed, tampered with, another master key, or another context. */
export class UnsealError extends Error {
  constructor(reason: string) {
    super(`sealed value does not open: ${reason}`);
    this.name = 'UnsealError';
  }
}

export class Sealer {
  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('the master key must be 32 bytes');
  }

  /**
   * `v1.<iv>.<tag>.<ciphertext>`, base64url parts. `context`, when given, is bound to the value as
   * GCM additional data (not stored): the value then opens only with the same context, so a
   * sealed value copied into another row (another tenant's) does not open there.
   */
  seal(plain: string, context?: string): SealedText {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    if (context !== undefined) c.setAAD(Buffer.from(context, 'utf8'));
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return [VERSION, iv.toString('base64url'), c.getAuthTag().toString('base64url'), body.toString('base64url')].join('.') as SealedText;
  }

  /** The plaintext of seal(plain, context); UnsealError when it does not open. */
  open(sealed: string, context?: string): string {
    const [version, iv, tag, body] = sealed.split('.');
    if (version !== VERSION || iv === undefined || tag === undefined || body === undefined) throw new UnsealError('not a sealed value');
    const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    if (context !== undefined) d.setAAD(Buffer.from(context, 'utf8'));
    d.setAuthTag(Buffer.from(tag, 'base64url'));
    try {
      return Buffer.concat([d.update(Buffer.from(body, 'base64url')), d.final()]).toString('utf8');
    } catch {
      // GCM's own message ("Unsupported state or unable to authenticate data") says nothing more.
      throw new UnsealError('authentication failed');
    }
  }
}

export function parseMasterKey(value: string): Buffer {
  const v = value.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(v) ? Buffer.from(v, 'hex') : Buffer.from(v, 'base64');
  if (key.length !== 32) throw new Error('SVC_MASTER_KEY must be 32 bytes, as 64 hex characters or base64');
  return key;
}

/** The configured master key, or the one in the data dir (created on first start). */
export function loadMasterKey(configured: string | undefined, dataDir: string): Buffer {
  if (configured) return parseMasterKey(configured);
  const file = join(dataDir, 'master.key');
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  return parseMasterKey(readFileSync(file, 'utf8'));
}
