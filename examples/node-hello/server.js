// A small HTTP server: svc routes <name>.<base-domain> to it. It answers JSON, with how long it
// has been up, and stops cleanly on SIGTERM (svc stops containers with it).
import { createServer } from 'node:http';

const port = Number(process.env.PORT ?? 8000);
const started = Date.now();

const server = createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ hello: 'from svc', path: req.url, node: process.version, up_seconds: Math.round((Date.now() - started) / 1000) }) + '\n');
});
server.listen(port, () => console.log(`listening on ${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
