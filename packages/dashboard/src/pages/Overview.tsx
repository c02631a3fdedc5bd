// What a tenant sees first: usage against quota, what needs attention, and recent activity.
// Every read starts at once (one round of parallel requests, no waterfall).
import { useQueries } from '@tanstack/react-query';
import { client } from '../api.js';
import { href } from '../router.js';
import { Ago, bytes, ErrorNote, Gauge, Section, Status } from '../ui.js';

export function Overview() {
  const [usage, services, databases, environments, activity] = useQueries({
    queries: [
      { queryKey: ['usage'], queryFn: () => client.usage() },
      { queryKey: ['services', 0, 200], queryFn: () => client.listServices({ limit: 200 }) },
      { queryKey: ['databases'], queryFn: () => client.databases({ limit: 200 }) },
      { queryKey: ['environments'], queryFn: () => client.environments({ limit: 200 }) },
      { queryKey: ['activity', 'recent'], queryFn: () => client.activity({ limit: 10 }) },
    ],
  });
  const failing = [
    ...(services.data ?? [])
      .filter((s) => s.status === 'failed' || s.status === 'crashed' || s.circuit_open)
      .map((s) => ({ key: `s-${s.id}`, link: href({ page: 'service', id: s.id }), name: `Service ${s.name}`, status: s.status, error: s.last_error })),
    ...(databases.data ?? [])
      .filter((d) => d.status === 'failed')
      .map((d) => ({ key: `d-${d.id}`, link: href({ page: 'databases' }), name: `Database ${d.name}`, status: d.status, error: d.last_error })),
    ...(environments.data ?? [])
      .filter((e) => e.last_error !== null)
      .map((e) => ({ key: `e-${e.id}`, link: href({ page: 'environment', id: e.id }), name: `Environment ${e.name}`, status: e.status, error: e.last_error })),
  ];
  const u = usage.data;
  return (
    <>
      <h1>Overview</h1>
      <Section title="Usage">
        <ErrorNote error={usage.error} />
        {u ? (
          <div className="gauges">
            <Gauge label="Services" used={u.services.used} max={u.services.max} />
            <Gauge label="Databases" used={u.databases.used} max={u.databases.max} />
            <Gauge label="Environments" used={u.environments.used} max={u.environments.max} />
            <Gauge label="API keys" used={u.api_keys.used} max={u.api_keys.max} />
            <Gauge label="Disk" used={Math.round((u.disk_used_bytes / 2 ** 30) * 10) / 10} max={u.disk_gb} unit="GiB" />
            <p className="hint">
              Memory {u.memory_mb} MB and {u.cpu_cores} CPU cores per workload at most; disk measured{' '}
              {u.disk_measured_at === null ? 'not yet' : <Ago unix={u.disk_measured_at} />} ({bytes(u.disk_used_bytes)}).
            </p>
          </div>
        ) : null}
      </Section>
      <Section title="Needs attention">
        <ErrorNote error={services.error ?? databases.error ?? environments.error} />
        {failing.length === 0 ? (
          <p>Nothing is failing.</p>
        ) : (
          <ul className="plain">
            {failing.map((f) => (
              <li key={f.key}>
                <a href={f.link}>{f.name}</a> <Status value={f.status} />
                {f.error ? <p className="error-detail">{f.error}</p> : null}
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Section title="Recent activity" actions={<a href={href({ page: 'activity' })}>All activity</a>}>
        <ErrorNote error={activity.error} />
        <ul className="plain">
          {(activity.data ?? []).map((a) => (
            <li key={a.id}>
              <code>{a.action}</code> {a.resource_type} {a.resource_id} · <Ago unix={a.created_at} />
            </li>
          ))}
        </ul>
        {activity.data?.length === 0 ? <p>No activity yet.</p> : null}
      </Section>
    </>
  );
}
