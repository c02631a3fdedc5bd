// An environment's interactive terminal over a WebSocket (beyond the spec, issue 24).
//
// GET /v1/environments/{id}/terminal?cols=&rows= upgrades to a WebSocket once the environment's
// shell runs: everything that can refuse it (the key, a foreign or stopped environment, the exec
// slots, an agent that does not answer) does so before the upgrade, with a status and {error}.
// Then:
//   client -> svcd   binary: input for the terminal; text: {"type":"resize","cols":N,"rows":N}
//   svcd -> client   binary: the terminal's output; text: {"type":"exit","exit_code":N}, then a
//                    normal close (1000). A terminal that ended without its exit closes with 1011.
// Backpressure both ways: a client that stops reading pauses the terminal's output (and so the
// shell, once the agent's buffers fill), and input waits for the agent's connection to drain.
import type { WebSocket } from '@fastify/websocket';
import { EnvironmentParams } from '@svc/contract';
import { Type } from 'typebox';
import type { FastifyRequest } from 'fastify';
import type { Deps } from '../../app.js';
import type { Socket } from 'node:net';
import { AppError, ValidationError } from '../../errors.js';
import type { TimerHandle, Timers } from '../../clock.js';
import type { AgentTerminal, TerminalSize } from '../../environments/agent.js';
import { TENANT_SESSION_CAPS } from '../../sessions/session-limits.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

const SIZE = { minimum: 1, maximum: 1000 };
export const TerminalQuery = Type.Object({
  cols: Type.Optional(Type.Integer({ ...SIZE, description: 'columns; default 80' })),
  rows: Type.Optional(Type.Integer({ ...SIZE, description: 'rows; default 24' })),
});
const SUMMARY: string = `An interactive terminal: a WebSocket to a login shell on a pseudo-terminal in /workspace (binary frames: input and output; text frames: {"type":"resize","cols","rows"} from the client, {"type":"exit","exit_code"} from svc before it closes). Refused before the upgrade: 404, 409 for a stopped environment or at the tenant's ${TENANT_SESSION_CAPS.exec} exec slots (a terminal holds one while open), 503 when the environment's agent does not answer`;
/** Output the client has not taken yet past which the terminal's output is paused. */
const OUTPUT_BUFFERED_MAX_BYTES = 1024 * 1024;

export function environmentTerminalRoutes(deps: Deps): ReturnType<typeof routePlugin> {
  const { environments } = deps;
  // The terminal opened before the upgrade, for the handler that runs after it.
  const opened = new WeakMap<FastifyRequest, AgentTerminal>();
  // Everything that can refuse the terminal, before the upgrade: a refusal is a status and {error}.
  const openBeforeUpgrade = async (request: FastifyRequest): Promise<void> => {
    // A plain GET is not refused here: the handler says what it needs.
    if (!request.ws) return;
    // Only a WebSocket upgrade opens a shell (ws refuses anything else after this, with no {error}).
    const h = request.headers;
    if (h.upgrade?.toLowerCase() !== 'websocket' || h['sec-websocket-version'] !== '13' || typeof h['sec-websocket-key'] !== 'string') {
      throw new ValidationError('a terminal is a WebSocket upgrade (Upgrade: websocket, Sec-WebSocket-Version: 13, Sec-WebSocket-Key)');
    }
    const params = request.params as { envID: string };
    const query = request.query as { cols?: number; rows?: number };
    // Taken now: the client may go while the terminal opens, and its close must not be missed
    // (in practice Node notices a client gone from an upgrade only when it next writes to it, after
    // this; the check is for the case it noticed sooner).
    const connection = request.raw.socket as Socket | undefined;
    const terminal = await environments.openTerminal(tenantOf(request), params.envID, { cols: query.cols ?? 80, rows: query.rows ?? 24 });
    if (!connection || connection.destroyed) {
      terminal.close();
      return;
    }
    opened.set(request, terminal);
    // However the upgrade ends (the client gone before it completed), the terminal goes with the connection.
    connection.once('close', () => terminal.close());
  };
  return routePlugin((app) => {
    app.route({
        method: 'GET',
        url: '/v1/environments/:envID/terminal',
        // wsHandler (not `websocket: true`, which hides the route from the OpenAPI document); the
        // handler answers a plain GET.
        wsHandler: (socket, request) => {
          const terminal = opened.get(request);
          if (!terminal) {
            socket.close(1011, 'the terminal was not opened');
            return;
          }
          bridge(socket, terminal, deps.timers);
        },
        config: { svc: { auth: 'key', longRunning: true } },
        schema: {
          summary: SUMMARY,
          tags: ['environments'],
          params: EnvironmentParams,
          querystring: TerminalQuery,
          response: { 101: Type.Null({ description: 'Switching Protocols: the WebSocket' }), ...errors(...KEY_ROUTE_ERRORS, 404, 409, 426) },
        },
        preHandler: openBeforeUpgrade,
        handler: () => {
          throw new AppError(426, 'a terminal is a WebSocket: send this request as an upgrade (Connection: Upgrade, Upgrade: websocket)', { upgrade: 'websocket' });
        },
    });
  });
}

/** A terminal whose client has not answered a ping since the last one is gone (it vanished without a close). */
const PING_EVERY_MS = 30_000;
/** Output held back this long for a client that does not read ends the terminal: its slot is not held for good. */
const PAUSED_OUTPUT_MAX_MS = 60_000;

/** Carries the terminal over the WebSocket both ways, with backpressure, until either ends. */
function bridge(socket: WebSocket, terminal: AgentTerminal, timers: Timers): void {
  const output = terminal.output;
  let pausedSince: TimerHandle | null = null;
  const resume = () => {
    pausedSince?.cancel();
    pausedSince = null;
    output.resume();
  };
  output.on('data', (chunk: Buffer) => {
    socket.send(chunk, { binary: true }, () => {
      if (output.isPaused() && socket.bufferedAmount < OUTPUT_BUFFERED_MAX_BYTES) resume();
    });
    if (socket.bufferedAmount >= OUTPUT_BUFFERED_MAX_BYTES && !output.isPaused()) {
      output.pause();
      pausedSince = timers.setTimeout(() => socket.terminate(), PAUSED_OUTPUT_MAX_MS);
    }
  });
  output.on('end', () => {
    if (terminal.exitCode === null) {
      socket.close(1011, 'the terminal ended without its exit code');
      return;
    }
    socket.send(JSON.stringify({ type: 'exit', exit_code: terminal.exitCode }), () => socket.close(1000));
  });
  // Ended without its end (the agent's connection failed): the client is told, not left waiting.
  output.on('close', () => {
    if (!output.readableEnded) socket.close(1011, 'the terminal connection failed');
  });
  output.on('error', () => socket.close(1011, 'the terminal connection failed'));
  terminal.onClose(() => {
    // Output read to its end first ('end' above closes the socket with the exit code).
    if (!output.readableEnded) output.resume();
  });

  // Input waits for the agent's connection to drain; ws may still deliver frames it had read
  // before the pause, so one wait is registered, not one per frame.
  let waitingForDrain = false;
  socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
    if (isBinary) {
      if (!terminal.write(bytes) && !waitingForDrain) {
        waitingForDrain = true;
        socket.pause();
        terminal.onDrain(() => {
          waitingForDrain = false;
          socket.resume();
        });
      }
      return;
    }
    const size = resizeOf(bytes.toString('utf8'));
    if (size) terminal.resize(size);
  });

  let answered = true;
  socket.on('pong', () => (answered = true));
  const ping = timers.setInterval(() => {
    if (!answered) {
      socket.terminate();
      return;
    }
    answered = false;
    socket.ping();
  }, PING_EVERY_MS);
  const end = () => {
    ping.cancel();
    pausedSince?.cancel();
    terminal.close();
  };
  socket.on('close', end);
  socket.on('error', end);
}

/** A resize message, or null for a text frame that is not one (ignored: text frames are control only). */
function resizeOf(text: string): TerminalSize | null {
  try {
    const m = JSON.parse(text) as { type?: unknown; cols?: unknown; rows?: unknown };
    const ok = (n: unknown): n is number => Number.isInteger(n) && (n as number) >= SIZE.minimum && (n as number) <= SIZE.maximum;
    return m.type === 'resize' && ok(m.cols) && ok(m.rows) ? { cols: m.cols, rows: m.rows } : null;
  } catch {
    return null;
  }
}
