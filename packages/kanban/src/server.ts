// The board's process, as svcd starts it in the board's container:
//   KANBAN_ADMIN_TOKEN_SHA256  SHA-256 (hex) of the admin token (required)
//   KANBAN_DATA_DIR            where board.sqlite lives (the board's volume; default /data)
//   PORT                       where it listens (default 8080)
import { createServer } from 'node:http';
import { join } from 'node:path';
import { boardApp } from './app.js';
import { BoardStore } from './store.js';

const tokenHash = process.env.KANBAN_ADMIN_TOKEN_SHA256 ?? '';
if (!/^[0-9a-f]{64}$/.test(tokenHash)) {
  console.error('KANBAN_ADMIN_TOKEN_SHA256 must be the hex SHA-256 of the admin token');
  process.exit(2);
}
const store = new BoardStore(join(process.env.KANBAN_DATA_DIR ?? '/data', 'board.sqlite'));
const server = createServer(boardApp({ store, adminTokenSha256: tokenHash, publicDir: new URL('../public/', import.meta.url) }));
server.requestTimeout = 30_000;
server.headersTimeout = 10_000;
const port = Number(process.env.PORT ?? 8080);
server.listen(port, () => console.log(`kanban board listening on :${port}`));

// The engine stops containers with SIGTERM: finish what is in flight, then close the file.
process.on('SIGTERM', () => {
  server.close(() => {
    store.close();
    process.exit(0);
  });
  server.closeIdleConnections();
});
