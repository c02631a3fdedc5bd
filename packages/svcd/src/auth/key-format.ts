import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// An API key is `<keyID>.<secret>`: the keyID finds the record, the secret proves possession.
// The secret has 256 bits of entropy, so a plain SHA-256 is the right hash (a slow password hash
// buys nothing against a random secret and would cost every request).

export interface GeneratedKey {
  id: string;
  secret: string;
  apiKey: string;
  prefix: string;
  secretHash: string;
}

export function generateKey(): GeneratedKey {
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  return { id, secret, apiKey: `${id}.${secret}`, prefix: keyPrefix(id), secretHash: hashSecret(secret) };
}

/** Shown in lists so a person can tell keys apart; part of the public id, none of the secret. */
export function keyPrefix(id: string): string {
  return `svc_${id.slice(0, 8)}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** Splits a presented key; null when it is not of the form id.secret. */
export function parseKey(presented: string): { id: string; secret: string } | null {
  const dot = presented.indexOf('.');
  if (dot <= 0 || dot === presented.length - 1) return null;
  const id = presented.slice(0, dot);
  if (id.length > 64) return null;
  return { id, secret: presented.slice(dot + 1) };
}

/** Constant-time equality of two hex digests of equal length. */
export function digestsEqual(aHex: string, bHex: string): boolean {
  const a = Buffer.from(aHex, 'hex');
  const b = Buffer.from(bHex, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Constant-time membership of a presented token in a configured list (hash both to one length). */
export function tokenInList(presented: string, tokens: readonly string[]): boolean {
  const p = createHash('sha256').update(presented).digest();
  let found = false;
  for (const t of tokens) {
    // No early exit: the time taken does not say which token, or how much of it, matched.
    if (timingSafeEqual(p, createHash('sha256').update(t).digest())) found = true;
  }
  return found;
}
