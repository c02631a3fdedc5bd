// The tenant's task board: create it, open it, reveal its admin token (audit-logged).
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import type { KanbanAdminToken } from '@svc/client';
import { ApiError } from '@svc/client';
import { client } from '../api.js';
import { Ago, ConfirmButton, ErrorNote, Secret, Section, Status } from '../ui.js';

export function Board() {
  const queryClient = useQueryClient();
  const [token, setToken] = useState<KanbanAdminToken | null>(null);
  const board = useQuery({
    queryKey: ['kanban'],
    // No board yet is a 404: shown as the offer to create one, not as an error.
    queryFn: async () => {
      try {
        return await client.kanban();
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) return null;
        throw err;
      }
    },
    refetchInterval: 3_000,
  });
  const create = useMutation({ mutationFn: () => client.createKanban(), onSuccess: () => queryClient.invalidateQueries({ queryKey: ['kanban'] }) });
  const reveal = useMutation({ mutationFn: () => client.kanbanAdminToken(), onSuccess: setToken });
  const remove = useMutation({
    mutationFn: () => client.deleteKanban(),
    onSuccess: async () => {
      setToken(null);
      await queryClient.invalidateQueries({ queryKey: ['kanban'] });
    },
  });
  const b = board.data;
  return (
    <>
      <h1>Task board</h1>
      <Section title="Board">
        <ErrorNote error={board.error ?? create.error ?? reveal.error ?? remove.error} />
        {b === null ? (
          <>
            <p>You have no task board yet.</p>
            <button type="button" onClick={() => create.mutate()} disabled={create.isPending}>
              Create the task board
            </button>
          </>
        ) : b ? (
          <>
            <dl className="facts">
              <dt>Status</dt>
              <dd>
                <Status value={b.status} />
              </dd>
              <dt>Address</dt>
              <dd>{b.url ? <a href={b.url}>{b.url}</a> : 'not running yet'}</dd>
              <dt>Created</dt>
              <dd>
                <Ago unix={b.created_at} />
              </dd>
            </dl>
            {b.last_error ? <p className="error-detail">{b.last_error}</p> : null}
            <div className="actions">
              <ConfirmButton question="Revealing the admin token is written to the audit log. Reveal it?" onConfirm={() => reveal.mutate()} pending={reveal.isPending}>
                Reveal admin token
              </ConfirmButton>
              <ConfirmButton question="Delete the task board and its cards?" onConfirm={() => remove.mutate()} pending={remove.isPending} danger>
                Delete
              </ConfirmButton>
            </div>
            {token ? <Secret label="Board admin token" value={token.admin_token} note="Sign in to the board with it. This reveal was audit-logged." /> : null}
          </>
        ) : (
          <p className="loading">Loading…</p>
        )}
      </Section>
    </>
  );
}
