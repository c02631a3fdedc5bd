// The tenant's activity, filtered by resource type and action, a page at a time.
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { client } from '../api.js';
import { Ago, ErrorNote, Pager, Section, TableWrap } from '../ui.js';

const PAGE = 50;
const TYPES = ['', 'service', 'deployment', 'build', 'database', 'snapshot', 'environment', 'kanban', 'key', 'tenant', 'domain'];

export function Activity() {
  const [offset, setOffset] = useState(0);
  const [type, setType] = useState('');
  const [action, setAction] = useState('');
  const query = { limit: PAGE, offset, resource_type: type || undefined, action: action.trim() || undefined };
  const list = useQuery({ queryKey: ['activity', query], queryFn: () => client.activity(query) });
  return (
    <>
      <h1>Activity</h1>
      <Section title="Filter">
        <form className="row" onSubmit={(e) => e.preventDefault()}>
          <div>
            <label htmlFor="act-type">Resource type</label>
            <select
              id="act-type"
              value={type}
              onChange={(e) => {
                setType(e.target.value);
                setOffset(0);
              }}
            >
              {TYPES.map((t) => (
                <option key={t} value={t}>
                  {t === '' ? 'any' : t}
                </option>
              ))}
            </select>
          </div>
          <div>
            <label htmlFor="act-action">Action</label>
            <input
              id="act-action"
              maxLength={64}
              value={action}
              placeholder="service.created"
              onChange={(e) => {
                setAction(e.target.value);
                setOffset(0);
              }}
            />
          </div>
        </form>
      </Section>
      <Section title="Entries">
        <ErrorNote error={list.error} />
        {list.data?.length === 0 ? <p>Nothing matches.</p> : null}
        <TableWrap label="Activity table">
          <table>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Action</th>
                <th scope="col">Resource</th>
                <th scope="col">Details</th>
              </tr>
            </thead>
            <tbody>
              {(list.data ?? []).map((a) => (
                <tr key={a.id}>
                  <td>
                    <Ago unix={a.created_at} />
                  </td>
                  <td>
                    <code>{a.action}</code>
                  </td>
                  <td>
                    {a.resource_type} <code>{a.resource_id}</code>
                  </td>
                  <td>
                    <code className="details">{Object.keys(a.details).length > 0 ? JSON.stringify(a.details) : ''}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        <Pager offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
      </Section>
    </>
  );
}
