// What Caddy's file storage (--tls-storage) holds for a name. Caddy (certmagic's FileStorage)
// keeps a certificate as certificates/<issuer>/<name>/<name>.crt, .key and .json, the .json
// written last; a name with all three is one Caddy loads instead of ordering.
import { X509Certificate } from 'node:crypto';
import { access, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

/** A certificate stored for `name` by any issuer (unix seconds; the longest-lived), or null. */
export async function storedCertificate(storageDir: string, name: string): Promise<{ validFrom: number; validTo: number } | null> {
  // Only plain host names (routed hosts, checked by the caller) name a folder here.
  if (!/^[a-z0-9.-]+$/.test(name) || name.startsWith('.')) return null;
  let issuers: string[];
  try {
    issuers = await readdir(join(storageDir, 'certificates'));
  } catch {
    return null; // nothing stored yet
  }
  let best: { validFrom: number; validTo: number } | null = null;
  for (const issuer of issuers) {
    const base = join(storageDir, 'certificates', issuer, name, name);
    try {
      await access(`${base}.json`);
      await access(`${base}.key`);
      const cert = new X509Certificate(await readFile(`${base}.crt`));
      const validity = { validFrom: Math.floor(Date.parse(cert.validFrom) / 1000), validTo: Math.floor(Date.parse(cert.validTo) / 1000) };
      if (!best || validity.validTo > best.validTo) best = validity;
    } catch {
      // not stored by this issuer, or being written
    }
  }
  return best;
}
