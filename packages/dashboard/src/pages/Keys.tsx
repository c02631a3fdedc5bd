// API keys: create one (shown once, with a copy button), list them, revoke.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import type { CreatedKey } from '@svc/client';
import { client, sessionQuery } from '../api.js';
import { Ago, ConfirmButton, ErrorNote, Secret, Section, TableWrap } from '../ui.js';

const EXPIRIES: Array<[string, number | undefined]> = [
  ['Never', undefined],
  ['1 day', 86_400],
  ['30 days', 30 * 86_400],
  ['1 year', 365 * 86_400],
];

export function Keys() {
  const queryClient = useQueryClient();
  const [name, setName] = useState('');
  const [expiry, setExpiry] = useState('0');
  const [created, setCreated] = useState<CreatedKey | null>(null);
  const keys = useQuery({ queryKey: ['keys'], queryFn: () => client.listKeys() });
  const session = useQuery(sessionQuery);
  const create = useMutation({
    mutationFn: () => client.createKey({ name: name.trim() === '' ? undefined : name.trim(), expires_in: EXPIRIES[Number(expiry)]?.[1] }),
    onSuccess: async (k) => {
      setCreated(k);
      setName('');
      await queryClient.invalidateQueries({ queryKey: ['keys'] });
    },
  });
  const revoke = useMutation({
    mutationFn: (id: string) => client.revokeKey(id),
    onSuccess: async (_answer, id) => {
      // This session came from that key and has ended with it: back to sign-in, nothing kept.
      if (id === session.data?.key_id) {
        queryClient.clear();
        window.location.replace('/');
        return;
      }
      await queryClient.invalidateQueries({ queryKey: ['keys'] });
    },
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    create.mutate();
  }
  return (
    <>
      <h1>API keys</h1>
      <Section title="Create a key">
        <form onSubmit={onSubmit} className="row">
          <div>
            <label htmlFor="key-name">Name</label>
            <input id="key-name" maxLength={128} value={name} onChange={(e) => setName(e.target.value)} placeholder="ci" />
          </div>
          <div>
            <label htmlFor="key-expiry">Expires</label>
            <select id="key-expiry" value={expiry} onChange={(e) => setExpiry(e.target.value)}>
              {EXPIRIES.map(([label], i) => (
                <option key={label} value={i}>
                  {label}
                </option>
              ))}
            </select>
          </div>
          <button type="submit" disabled={create.isPending}>
            Create key
          </button>
        </form>
        <ErrorNote error={create.error} />
        {created ? <Secret label={`New key ${created.name}`} value={created.api_key} note="Copy it now: it is shown only once." /> : null}
      </Section>
      <Section title="Your keys">
        <ErrorNote error={keys.error ?? revoke.error} />
        <TableWrap label="Keys table">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Prefix</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">Expires</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {(keys.data ?? []).map((k) => (
                <tr key={k.id}>
                  <td>
                    {k.name}
                    {session.data?.key_id === k.id ? ' (this session)' : ''}
                  </td>
                  <td>
                    <code>{k.prefix}</code>
                  </td>
                  <td>
                    <Ago unix={k.created_at} />
                  </td>
                  <td>
                    <Ago unix={k.last_used_at} />
                  </td>
                  <td>{k.expires_at === null ? 'never' : <Ago unix={k.expires_at} />}</td>
                  <td>
                    <ConfirmButton
                      question={`Revoke the key ${k.name}?${session.data?.key_id === k.id ? ' This session came from it and ends too.' : ''}`}
                      onConfirm={() => revoke.mutate(k.id)}
                      pending={revoke.isPending}
                      label={`Revoke ${k.name} (${k.prefix})`}
                      danger
                      small
                    >
                      Revoke
                    </ConfirmButton>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
      </Section>
    </>
  );
}
