// Developer environments: the list and creation from a template.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import { client } from '../api.js';
import { href, navigate } from '../router.js';
import { Ago, ErrorNote, Pager, Section, Status } from '../ui.js';

const PAGE = 20;

export function Environments() {
  const queryClient = useQueryClient();
  const [offset, setOffset] = useState(0);
  const [name, setName] = useState('');
  const [template, setTemplate] = useState('default');
  const [hours, setHours] = useState('1');
  const templates = useQuery({ queryKey: ['templates'], queryFn: () => client.templates(), staleTime: Infinity });
  const list = useQuery({ queryKey: ['environments', offset], queryFn: () => client.environments({ limit: PAGE, offset }), refetchInterval: 5_000 });
  const create = useMutation({
    mutationFn: () => client.createEnvironment({ name: name.trim(), template_id: template, lease_duration_seconds: Math.round(Number(hours) * 3600) }),
    onSuccess: async (env) => {
      await queryClient.invalidateQueries({ queryKey: ['environments'] });
      navigate({ page: 'environment', id: env.id });
    },
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    create.mutate();
  }
  return (
    <>
      <h1>Environments</h1>
      <Section title="Create an environment">
        <form onSubmit={onSubmit} className="row">
          <div>
            <label htmlFor="env-name">Name</label>
            <input id="env-name" required maxLength={63} pattern="[a-zA-Z][a-zA-Z0-9_\-]*" value={name} onChange={(e) => setName(e.target.value)} />
          </div>
          <div>
            <label htmlFor="env-template">Template</label>
            <select id="env-template" value={template} onChange={(e) => setTemplate(e.target.value)}>
              {(templates.data ?? [{ id: 'default', description: '' }]).map((t) => (
                <option key={t.id} value={t.id}>
                  {t.id}
                  {t.description ? ` — ${t.description}` : ''}
                </option>
              ))}
            </select>
          </div>
          <div>
            <label htmlFor="env-hours">Lease (hours)</label>
            <input id="env-hours" type="number" min={0.1} max={720} step={0.1} value={hours} onChange={(e) => setHours(e.target.value)} />
          </div>
          <button type="submit" disabled={create.isPending}>
            {create.isPending ? 'Creating…' : 'Create environment'}
          </button>
        </form>
        <ErrorNote error={create.error ?? templates.error} />
      </Section>
      <Section title="Your environments">
        <ErrorNote error={list.error} />
        {list.data?.length === 0 && offset === 0 ? <p>No environments yet.</p> : null}
        <ul className="plain">
          {(list.data ?? []).map((e) => (
            <li key={e.id}>
              <a href={href({ page: 'environment', id: e.id })}>{e.name}</a> <Status value={e.status} /> · {e.template_id} · lease ends{' '}
              <Ago unix={e.lease_expires_at} />
            </li>
          ))}
        </ul>
        <Pager offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
      </Section>
    </>
  );
}
