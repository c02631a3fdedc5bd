// nginx as the reference reverse proxy of bench/proxy and bench/tls: Debian's binary on a config of
// its own (keep-alive upstream pool, `worker_processes auto`, the X-Forwarded-* headers svc's
// Caddy sets), plain HTTP or terminating TLS with the certificate given.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Starts nginx in `dir` on 127.0.0.1:port in front of `upstream`; answers its stop. */
export function startNginx(dir: string, port: number, upstream: string, tls?: { cert: string; key: string }): () => void {
  const conf = join(dir, 'nginx.conf');
  const listen = tls ? `listen 127.0.0.1:${port} ssl;\n    ssl_certificate ${tls.cert};\n    ssl_certificate_key ${tls.key};` : `listen 127.0.0.1:${port};`;
  writeFileSync(conf, `
worker_processes auto;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream app { server ${upstream}; keepalive 64; }
  server {
    ${listen}
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $host;
    }
  }
}
`);
  const proc = spawn('nginx', ['-p', dir, '-c', conf, '-g', 'daemon off;'], { stdio: 'inherit' });
  return () => proc.kill('SIGQUIT');
}
