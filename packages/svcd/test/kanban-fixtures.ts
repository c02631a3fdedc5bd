// What the task-board tests share: waiting for a board to run, and calling its own API.
import assert from 'node:assert/strict';
import type { KanbanBoard, SvcClient } from '@svc/client';
import { waitFor } from './harness.js';

/** Polls GET /v1/kanban until the board leaves provisioning (the first one builds its image). */
export async function settledBoard(c: SvcClient, ms = 240_000): Promise<KanbanBoard> {
  return waitFor('the task board to leave provisioning', async () => {
    const b = await c.kanban();
    return b.status === 'provisioning' ? undefined : b;
  }, ms);
}

export async function runningBoard(c: SvcClient): Promise<KanbanBoard> {
  const b = await settledBoard(c);
  assert.equal(b.status, 'running', b.last_error ?? '');
  assert.ok(b.url);
  return b;
}

/** An answer of the board's API, its JSON body taken as the type the caller expects. */
export interface BoardAnswer<T> {
  status: number;
  body: T;
}

/** The board's own JSON API, with its admin token. */
export async function boardApi<T = unknown>(url: string, token: string, method: string, path: string, body?: unknown): Promise<BoardAnswer<T>> {
  const res = await fetch(new URL(path, url), {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
}

export interface BoardWithColumns {
  id: number;
  name: string;
  columns: Array<{ id: number; name: string; cards: Array<{ id: number; title: string }> }>;
}
