// Managed databases: create, watch provisioning, reveal the connection string (audit-logged), delete.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import type { ConnectionString } from '@svc/client';
import { client } from '../api.js';
import { Ago, ConfirmButton, ErrorNote, Pager, Secret, Section, Status } from '../ui.js';

const PAGE = 20;

export function Databases() {
  const queryClient = useQueryClient();
  const [offset, setOffset] = useState(0);
  const [name, setName] = useState('');
  const [type, setType] = useState('postgres');
  const [revealed, setRevealed] = useState<Record<string, ConnectionString>>({});
  const list = useQuery({ queryKey: ['databases', offset], queryFn: () => client.databases({ limit: PAGE, offset }), refetchInterval: 3_000 });
  const create = useMutation({
    mutationFn: () => client.createDatabase({ name: name.trim(), type }),
    onSuccess: async () => {
      setName('');
      await queryClient.invalidateQueries({ queryKey: ['databases'] });
    },
  });
  const reveal = useMutation({
    mutationFn: (id: string) => client.connectionString(id),
    onSuccess: (c, id) => setRevealed((r) => ({ ...r, [id]: c })),
  });
  const remove = useMutation({
    mutationFn: (id: string) => client.deleteDatabase(id),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ['databases'] }),
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    create.mutate();
  }
  return (
    <>
      <h1>Databases</h1>
      <Section title="Create a database">
        <form onSubmit={onSubmit} className="row">
          <div>
            <label htmlFor="db-name">Name</label>
            <input id="db-name" required pattern="[a-z][a-z0-9\-]{0,62}" value={name} onChange={(e) => setName(e.target.value)} />
          </div>
          <div>
            <label htmlFor="db-type">Type</label>
            <select id="db-type" value={type} onChange={(e) => setType(e.target.value)}>
              <option value="postgres">PostgreSQL</option>
              <option value="redis">Redis</option>
            </select>
          </div>
          <button type="submit" disabled={create.isPending}>
            Create database
          </button>
        </form>
        <p className="hint">The name is the host name your services reach it by.</p>
        <ErrorNote error={create.error} />
      </Section>
      <Section title="Your databases">
        <ErrorNote error={list.error ?? reveal.error ?? remove.error} />
        {list.data?.length === 0 && offset === 0 ? <p>No databases yet.</p> : null}
        <ul className="plain">
          {(list.data ?? []).map((d) => (
            <li key={d.id} className="item">
              <div>
                <strong>{d.name}</strong> {d.type} <Status value={d.status} /> · {d.host}:{d.port} · <Ago unix={d.created_at} />
              </div>
              {d.last_error ? <p className="error-detail">{d.last_error}</p> : null}
              <div className="actions">
                <ConfirmButton
                  question="The connection string holds the password. Revealing it is written to the audit log. Reveal it?"
                  onConfirm={() => reveal.mutate(d.id)}
                  pending={reveal.isPending}
                >
                  Reveal connection string
                </ConfirmButton>
                <ConfirmButton question={`Delete the database ${d.name} and its data?`} onConfirm={() => remove.mutate(d.id)} pending={remove.isPending} danger>
                  Delete
                </ConfirmButton>
              </div>
              {revealed[d.id] ? (
                <>
                  <Secret label={`Connection string of ${d.name} (from your services)`} value={revealed[d.id]?.internal_connection_string ?? ''} />
                  <Secret label={`Connection string of ${d.name} (from the host)`} value={revealed[d.id]?.connection_string ?? ''} note="This reveal was audit-logged." />
                </>
              ) : null}
            </li>
          ))}
        </ul>
        <Pager offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
      </Section>
    </>
  );
}
