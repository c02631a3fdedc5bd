// Protocol-level readiness: a database is ready when a client can really use it, not when its
// port accepts TCP (PostgreSQL accepts during its start-up and answers "the database system is
// starting up"; initdb restarts the server once).
import { connect } from 'node:net';
import pg from 'pg';

export interface ProbeTarget {
  host: string;
  port: number;
  username: string;
  password: string;
  database: string | null;
}

/** A PostgreSQL start-up with password authentication, then `SELECT 1`. */
export async function probePostgres(t: ProbeTarget, timeoutMs = 3_000): Promise<void> {
  const client = new pg.Client({
    host: t.host,
    port: t.port,
    user: t.username,
    password: t.password,
    database: t.database ?? undefined,
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
  });
  // An error after connect (the server going away) must not crash the process.
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
  } finally {
    await client.end().catch(() => {});
  }
}

/** Redis AUTH with the password, then PING answered with PONG (RESP, written by hand: two commands). */
export function probeRedis(t: ProbeTarget, timeoutMs = 3_000): Promise<void> {
  const command = (...args: string[]) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  return new Promise((resolve, reject) => {
    const socket = connect(t.port, t.host);
    let answer = '';
    const fail = (err: Error) => {
      socket.destroy();
      reject(err);
    };
    socket.setTimeout(timeoutMs, () => fail(new Error('redis did not answer')));
    socket.on('error', fail);
    // Closed without an answer (docker-proxy accepts before the server listens, then hangs up):
    // a closed socket has no idle timeout left, so this is the only way the probe ends.
    socket.on('close', () => reject(new Error(answer ? `redis answered: ${answer.trim()}` : 'connection closed without an answer')));
    socket.on('connect', () => socket.write(command('AUTH', t.password) + command('PING')));
    socket.on('data', (d: Buffer) => {
      answer += d.toString();
      const lines = answer.split('\r\n');
      if (lines.length < 3) return;
      socket.end();
      if (lines[0] !== '+OK') reject(new Error(`AUTH: ${lines[0]}`));
      else if (lines[1] !== '+PONG') reject(new Error(`PING: ${lines[1]}`));
      else resolve();
    });
  });
}

/** The probe of a database type. */
export function probeDatabase(type: 'postgres' | 'redis', t: ProbeTarget, timeoutMs?: number): Promise<void> {
  return type === 'postgres' ? probePostgres(t, timeoutMs) : probeRedis(t, timeoutMs);
}
