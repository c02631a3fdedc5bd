// The dashboard's built files (packages/dashboard, built by `make build` with Vite), held in
// memory. The build is a handful of files well under a megabyte, so reading them once at start
// and answering from a map means no URL ever becomes a filesystem path (nothing to traverse), and
// each file is gzipped once instead of per request. A file changed on disk is served after the
// next start, which is when a new build is deployed anyway.
import { readdir, readFile } from 'node:fs/promises';
import { extname, join, relative, sep } from 'node:path';
import { gzipSync } from 'node:zlib';

export interface DashboardFile {
  body: Buffer;
  /** Present when gzip made it smaller. */
  gzipped: Buffer | null;
  contentType: string;
}

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
};

/** Files larger than this are not served (a build never makes one; a wrong --dashboard-dir might). */
const FILE_MAX_BYTES = 4 * 1024 * 1024;
const FILES_MAX = 200;

/**
 * Every servable file under `dir` by its URL path (`/index.html`, `/assets/index-1a2b.js`), or
 * null when the directory does not exist (the dashboard was not built).
 */
export async function loadDashboardFiles(dir: string): Promise<Map<string, DashboardFile> | null> {
  let names: string[];
  try {
    names = (await readdir(dir, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  const files = new Map<string, DashboardFile>();
  for (const path of names.slice(0, FILES_MAX)) {
    const contentType = CONTENT_TYPES[extname(path)];
    if (contentType === undefined) continue;
    const body = await readFile(path);
    if (body.length > FILE_MAX_BYTES) continue;
    const gzipped = gzipSync(body, { level: 9 });
    files.set('/' + relative(dir, path).split(sep).join('/'), { body, gzipped: gzipped.length < body.length ? gzipped : null, contentType });
  }
  return files;
}
