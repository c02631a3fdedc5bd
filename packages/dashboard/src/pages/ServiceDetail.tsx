// One service: its URL and state, the lifecycle actions, deployments, live logs, variables,
// builds with live build logs, snapshots and usage charts.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useCallback, useState, type SyntheticEvent } from 'react';
import { REPLICAS_MAX, SNAPSHOTS_PER_TENANT_MAX, type Build } from '@svc/client';
import { client } from '../api.js';
import { useGitSource } from '../git-source.js';
import { BarChart } from '../charts.js';
import { LiveLog } from '../live-log.js';
import { navigate } from '../router.js';
import { Ago, ConfirmButton, ErrorNote, Pager, Section, Status } from '../ui.js';

type Action = 'start' | 'stop' | 'restart' | 'redeploy' | 'reset';
/** Deployments and builds shown a page at a time (newest first). */
const PAGE = 10;
const ACTIONS: Array<[Action, string]> = [
  ['start', 'Start'],
  ['stop', 'Stop'],
  ['restart', 'Restart'],
  ['redeploy', 'Redeploy'],
  ['reset', 'Reset'],
];

export function ServiceDetail({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const service = useQuery({ queryKey: ['service', id], queryFn: () => client.service(id), refetchInterval: 3_000 });
  const action = useMutation({
    mutationFn: (a: Action) => client.serviceAction(id, a),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['service', id] }),
  });
  const remove = useMutation({
    mutationFn: () => client.deleteService(id),
    onSuccess: async () => {
      await queryClient.invalidateQueries({ queryKey: ['services'] });
      navigate({ page: 'services' });
    },
  });
  const s = service.data;
  // A failed refresh keeps what the page shows (and what is typed in it), with the error above.
  if (!s) return service.error ? <ErrorNote error={service.error} /> : <p className="loading">Loading…</p>;
  return (
    <>
      <h1>{s.name}</h1>
      <ErrorNote error={service.error} />
      <Section title="Status">
        <dl className="facts">
          <dt>Status</dt>
          <dd>
            <Status value={s.status} />
            {s.circuit_open ? ' (restarts stopped after repeated crashes: reset to try again)' : ''}
          </dd>
          <dt>URL</dt>
          <dd>{s.url ? <a href={s.url}>{s.url}</a> : 'not routed yet'}</dd>
          <dt>Image</dt>
          <dd>
            <code>{s.image === '' ? 'waiting for its first build' : s.image}</code> on port {s.port}
          </dd>
          <dt>Replicas</dt>
          <dd>
            <Scale id={id} replicas={s.replicas} />
          </dd>
          <dt>Crashes</dt>
          <dd>
            {s.crash_count} in the last 10 minutes{s.last_crash_at ? <>, last <Ago unix={s.last_crash_at} /></> : null}
          </dd>
        </dl>
        {s.last_error ? (
          <p className="error" role="alert">
            Last error: {s.last_error}
          </p>
        ) : null}
        <div className="actions">
          {ACTIONS.map(([a, label]) => (
            <button key={a} type="button" disabled={action.isPending} onClick={() => action.mutate(a)}>
              {label}
            </button>
          ))}
          <ConfirmButton question={`Delete the service ${s.name}? Its container and routes are removed.`} onConfirm={() => remove.mutate()} pending={remove.isPending} danger>
            Delete
          </ConfirmButton>
        </div>
        {action.isSuccess ? <p className="hint">{`${action.variables} requested: the status follows above.`}</p> : null}
        <ErrorNote error={action.error ?? remove.error} />
      </Section>
      <Deployments id={id} />
      <Logs id={id} running={s.status === 'running' || s.status === 'deploying'} />
      <EnvEditor id={id} />
      <Builds id={id} />
      <Snapshots id={id} />
      <Charts id={id} />
    </>
  );
}

function Deployments({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const [offset, setOffset] = useState(0);
  const list = useQuery({ queryKey: ['deployments', id, offset], queryFn: () => client.deployments(id, { limit: PAGE, offset }), refetchInterval: 3_000 });
  const cancel = useMutation({
    mutationFn: (deploymentId: string) => client.cancelDeployment(id, deploymentId),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['deployments', id] }),
  });
  return (
    <Section title="Deployments">
      <ErrorNote error={list.error ?? cancel.error} />
      <ul className="plain">
        {(list.data ?? []).map((d) => (
          <li key={d.id}>
            <Status value={d.status} /> {d.reason} · <code>{d.image}</code> · <Ago unix={d.created_at} />
            {d.status === 'pending' || d.status === 'running' ? (
              <button type="button" className="small" disabled={cancel.isPending} onClick={() => cancel.mutate(d.id)}>
                Cancel
              </button>
            ) : null}
            {d.last_error ? <p className="error-detail">{d.last_error}</p> : null}
          </li>
        ))}
      </ul>
      <Pager label="Deployment pages" offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
    </Section>
  );
}

function Logs({ id, running }: { id: string; running: boolean }) {
  const [follow, setFollow] = useState(true);
  const open = useCallback((signal: AbortSignal) => client.followServiceLogs(id, 100, signal), [id]);
  return (
    <Section
      title="Logs"
      actions={
        <button type="button" onClick={() => setFollow(!follow)} aria-pressed={follow}>
          {follow ? 'Pause' : 'Follow'}
        </button>
      }
    >
      <LiveLog label="Service logs" open={open} active={follow} reconnect={running} />
    </Section>
  );
}

function EnvEditor({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const [revealed, setRevealed] = useState(false);
  const [key, setKey] = useState('');
  const [value, setValue] = useState('');
  // A reveal is audit-logged: read once per click, not again on every focus of the window.
  const env = useQuery({
    queryKey: ['env', id, revealed],
    queryFn: () => client.serviceEnv(id, revealed),
    ...(revealed ? { staleTime: Infinity, refetchOnWindowFocus: false } : {}),
  });
  const set = useMutation({
    mutationFn: () => client.setServiceEnv(id, { [key.trim()]: value }),
    onSuccess: async () => {
      setKey('');
      setValue('');
      await queryClient.invalidateQueries({ queryKey: ['env', id] });
    },
  });
  const unset = useMutation({
    mutationFn: (k: string) => client.unsetServiceEnv(id, k),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ['env', id] }),
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    set.mutate();
  }
  const entries = Object.entries(env.data ?? {});
  return (
    <Section
      title="Environment variables"
      actions={
        revealed ? (
          <button type="button" onClick={() => setRevealed(false)}>
            Hide values
          </button>
        ) : (
          <ConfirmButton question="The values may hold secrets. Revealing them is written to the audit log. Reveal them?" onConfirm={() => setRevealed(true)}>
            Reveal values
          </ConfirmButton>
        )
      }
    >
      {revealed ? <p className="hint">This reveal was audit-logged.</p> : null}
      <ErrorNote error={env.error ?? unset.error} />
      {entries.length === 0 ? <p>No variables.</p> : null}
      <ul className="plain env">
        {entries.map(([k, v]) => (
          <li key={k}>
            <code>{k}</code> = <code>{v}</code>
            <button type="button" className="small" onClick={() => unset.mutate(k)} aria-label={`Remove ${k}`}>
              Remove
            </button>
          </li>
        ))}
      </ul>
      <form onSubmit={onSubmit} className="row">
        <div>
          <label htmlFor="env-key">Name</label>
          <input id="env-key" required pattern="[A-Za-z_][A-Za-z0-9_]*" maxLength={256} value={key} onChange={(e) => setKey(e.target.value)} />
        </div>
        <div>
          <label htmlFor="env-value">Value</label>
          <input id="env-value" type="password" autoComplete="off" value={value} onChange={(e) => setValue(e.target.value)} />
        </div>
        <button type="submit" disabled={set.isPending}>
          Set variable
        </button>
      </form>
      <p className="hint">Variables apply when the service next starts: restart it to apply them now.</p>
      <ErrorNote error={set.error} />
    </Section>
  );
}

/** How many copies run, and a form to change it (above 1 on a swarm only: the answer's error says so elsewhere). */
function Scale({ id, replicas }: { id: string; replicas: number }) {
  const queryClient = useQueryClient();
  const [wanted, setWanted] = useState('');
  const scale = useMutation({
    mutationFn: (n: number) => client.scaleService(id, n),
    onSuccess: () => setWanted(''),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['service', id] }),
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    scale.mutate(Number(wanted));
  }
  return (
    <>
      {replicas}
      <form onSubmit={onSubmit} className="row inline">
        <label htmlFor="replicas">Replicas</label>
        <input id="replicas" type="number" required min={1} max={REPLICAS_MAX} value={wanted} placeholder={String(replicas)} onChange={(e) => setWanted(e.target.value)} />
        <button type="submit" className="small" disabled={scale.isPending}>
          Scale
        </button>
      </form>
      <ErrorNote error={scale.error} />
    </>
  );
}

function Builds({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const git = useGitSource('build');
  const [watching, setWatching] = useState<string | null>(null);
  const [offset, setOffset] = useState(0);
  const builds = useQuery({ queryKey: ['builds', id, offset], queryFn: () => client.builds(id, { limit: PAGE, offset }), refetchInterval: 3_000 });
  const start = useMutation({
    mutationFn: () => client.createBuild(id, git.request()),
    onSuccess: async (b) => {
      setWatching(b.build_id);
      setOffset(0);
      await queryClient.invalidateQueries({ queryKey: ['builds', id] });
    },
  });
  const list: Build[] = builds.data ?? [];
  // The newest build by default, on the first page.
  const shown = watching ?? (offset === 0 ? list[0]?.id : undefined) ?? null;
  const open = useCallback((signal: AbortSignal) => client.followBuildLogs(id, shown ?? '', signal), [id, shown]);
  return (
    <Section title="Builds">
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          start.mutate();
        }}
      >
        {git.fields}
        <button type="submit" disabled={start.isPending}>
          Build and deploy
        </button>
      </form>
      <ErrorNote error={builds.error ?? start.error} />
      <ul className="plain">
        {list.map((b) => (
          <li key={b.id}>
            <Status value={b.status} /> {b.source_url} {b.source_ref ?? ''} · <Ago unix={b.created_at} />
            <button type="button" className="small" onClick={() => setWatching(b.id)} aria-pressed={shown === b.id}>
              Logs
            </button>
            {b.last_error ? <p className="error-detail">{b.last_error}</p> : null}
          </li>
        ))}
      </ul>
      <Pager label="Build pages" offset={offset} limit={PAGE} count={list.length} onChange={setOffset} />
      {shown ? <LiveLog label="Build logs" open={open} active /> : null}
    </Section>
  );
}

function Snapshots({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const [name, setName] = useState('');
  // A tenant keeps at most this many (the next is refused): one request holds them all, so this
  // service's are never on a page not fetched.
  const snapshots = useQuery({ queryKey: ['snapshots'], queryFn: () => client.listSnapshots({ limit: SNAPSHOTS_PER_TENANT_MAX }) });
  const take = useMutation({
    mutationFn: () => client.createSnapshot(id, name.trim()),
    onSuccess: async () => {
      setName('');
      await queryClient.invalidateQueries({ queryKey: ['snapshots'] });
    },
  });
  const mine = (snapshots.data ?? []).filter((s) => s.service_id === id);
  return (
    <Section title="Snapshots">
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          take.mutate();
        }}
      >
        <div>
          <label htmlFor="snap-name">Snapshot name</label>
          <input id="snap-name" required maxLength={128} value={name} onChange={(e) => setName(e.target.value)} />
        </div>
        <button type="submit" disabled={take.isPending}>
          Take snapshot
        </button>
      </form>
      <ErrorNote error={snapshots.error ?? take.error} />
      <ul className="plain">
        {mine.map((s) => (
          <li key={s.id}>
            {s.name} · <code>{s.image}</code> · {s.env_keys.length} variables · <Ago unix={s.created_at} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function Charts({ id }: { id: string }) {
  const metrics = useQuery({ queryKey: ['metrics', id], queryFn: () => client.serviceMetrics(id, { period: 'hourly' }), refetchInterval: 60_000 });
  const rollups = metrics.data ?? [];
  return (
    <Section title="CPU and memory (last 24 hours)">
      <ErrorNote error={metrics.error} />
      <div className="charts">
        <BarChart title="CPU" rollups={rollups} value={(r) => r.cpu_seconds} unit="CPU seconds" />
        <BarChart title="Memory" rollups={rollups} value={(r) => r.memory_avg_mb} unit="MB on average" />
      </div>
    </Section>
  );
}
