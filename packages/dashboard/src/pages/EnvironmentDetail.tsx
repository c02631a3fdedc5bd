// One environment: its lease (with a countdown and extend), start/stop/delete, a command
// console with history, previews with their links, and git sync into the workspace.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import { LEASE_MAX_S, type ExecResult } from '@svc/client';
import { client } from '../api.js';
import { navigate } from '../router.js';
import { Ago, ConfirmButton, ErrorNote, relative, Section, Status, useNow } from '../ui.js';

export function EnvironmentDetail({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const now = useNow(1_000);
  const env = useQuery({ queryKey: ['environment', id], queryFn: () => client.environment(id), refetchInterval: 5_000 });
  const refresh = () => queryClient.invalidateQueries({ queryKey: ['environment', id] });
  const extend = useMutation({ mutationFn: (seconds: number) => client.extendLease(id, seconds), onSuccess: refresh });
  const start = useMutation({ mutationFn: () => client.startEnvironment(id), onSettled: refresh });
  const stop = useMutation({ mutationFn: () => client.stopEnvironment(id), onSettled: refresh });
  const remove = useMutation({
    mutationFn: () => client.deleteEnvironment(id),
    onSuccess: async () => {
      await queryClient.invalidateQueries({ queryKey: ['environments'] });
      navigate({ page: 'environments' });
    },
  });
  const e = env.data;
  // A failed refresh keeps what the page shows (the console's history included), with the error above.
  if (!e) return env.error ? <ErrorNote error={env.error} /> : <p className="loading">Loading…</p>;
  const left = e.lease_expires_at - now / 1000;
  return (
    <>
      <h1>{e.name}</h1>
      <ErrorNote error={env.error} />
      <Section title="Status">
        <dl className="facts">
          <dt>Status</dt>
          <dd>
            <Status value={e.status} />
          </dd>
          <dt>Template</dt>
          <dd>
            {e.template_id} (<code>{e.image}</code>)
          </dd>
          <dt>Lease</dt>
          <dd>
            <span role="timer" aria-live="off">
              {left > 0 ? `ends ${relative(left)}` : 'ended'}
            </span>{' '}
            ({new Date(e.lease_expires_at * 1000).toLocaleString()})
          </dd>
          <dt>Workspace</dt>
          <dd>
            <code>{e.workspace}</code>
          </dd>
        </dl>
        {e.last_error ? (
          <p className="error" role="alert">
            Last error: {e.last_error}
          </p>
        ) : null}
        <div className="actions">
          {/* The lease runs duration_seconds from now: what is left plus an hour, at most the 30-day cap. */}
          <button type="button" disabled={extend.isPending} onClick={() => extend.mutate(Math.min(LEASE_MAX_S, Math.max(0, Math.round(left)) + 3600))}>
            Extend by 1 hour
          </button>
          <button type="button" onClick={() => start.mutate()} disabled={e.status === 'running' || start.isPending}>
            Start
          </button>
          <button type="button" onClick={() => stop.mutate()} disabled={e.status !== 'running' || stop.isPending}>
            Stop
          </button>
          <ConfirmButton question={`Delete the environment ${e.name} and its workspace?`} onConfirm={() => remove.mutate()} pending={remove.isPending} danger>
            Delete
          </ConfirmButton>
        </div>
        <ErrorNote error={extend.error ?? start.error ?? stop.error ?? remove.error} />
      </Section>
      <Console id={id} running={e.status === 'running'} />
      <Previews id={id} />
      <Sync id={id} />
    </>
  );
}

interface Ran {
  command: string;
  result: ExecResult | null;
  error: unknown;
}

function Console({ id, running }: { id: string; running: boolean }) {
  const [command, setCommand] = useState('');
  const [history, setHistory] = useState<Ran[]>([]);
  const [recall, setRecall] = useState(-1);
  const run = useMutation({
    // A console line is run by sh -c, as a terminal would (the API itself takes argv, no shell).
    mutationFn: (line: string) => client.exec(id, { command: ['sh', '-c', line], timeout: 60 }),
    onSuccess: (result, line) => setHistory((h) => [...h, { command: line, result, error: null }].slice(-50)),
    onError: (error, line) => setHistory((h) => [...h, { command: line, result: null, error }].slice(-50)),
  });
  function onSubmit(ev: SyntheticEvent) {
    ev.preventDefault();
    if (command.trim() === '') return;
    run.mutate(command);
    setCommand('');
    setRecall(-1);
  }
  function onKeyDown(ev: React.KeyboardEvent<HTMLInputElement>) {
    // Up and down walk the history, as in a shell.
    if (ev.key !== 'ArrowUp' && ev.key !== 'ArrowDown') return;
    ev.preventDefault();
    const next = ev.key === 'ArrowUp' ? Math.min(recall + 1, history.length - 1) : Math.max(recall - 1, -1);
    setRecall(next);
    setCommand(next === -1 ? '' : (history[history.length - 1 - next]?.command ?? ''));
  }
  return (
    <Section title="Console">
      {running ? null : <p className="hint">Start the environment to run commands.</p>}
      <div className="console" role="log" aria-label="Command output" tabIndex={0}>
        {history.length === 0 ? <div className="hint">Output of the commands you run appears here.</div> : null}
        {history.map((h, i) => (
          <div key={i} className="ran">
            <div className="prompt">$ {h.command}</div>
            {h.result ? (
              <>
                {h.result.stdout ? <pre>{h.result.stdout}</pre> : null}
                {h.result.stderr ? <pre className="stderr">{h.result.stderr}</pre> : null}
                <div className="hint">
                  exit {h.result.exit_code} · {h.result.duration_ms} ms{h.result.timed_out ? ' · timed out' : ''}
                  {h.result.truncated ? ' · output cut at 1 MiB' : ''}
                </div>
              </>
            ) : (
              <ErrorNote error={h.error} />
            )}
          </div>
        ))}
      </div>
      <form onSubmit={onSubmit} className="row">
        <div className="grow">
          <label htmlFor="console-input">Command</label>
          <input id="console-input" autoComplete="off" spellCheck={false} value={command} onChange={(ev) => setCommand(ev.target.value)} onKeyDown={onKeyDown} disabled={!running} />
        </div>
        <button type="submit" disabled={!running || run.isPending}>
          {run.isPending ? 'Running…' : 'Run'}
        </button>
      </form>
    </Section>
  );
}

function Previews({ id }: { id: string }) {
  const queryClient = useQueryClient();
  const [name, setName] = useState('');
  const [port, setPort] = useState('3000');
  const previews = useQuery({ queryKey: ['previews', id], queryFn: () => client.previews(id) });
  const create = useMutation({
    mutationFn: () => client.createPreview(id, { name: name.trim(), port: Number(port) }),
    onSuccess: async () => {
      setName('');
      await queryClient.invalidateQueries({ queryKey: ['previews', id] });
    },
  });
  const remove = useMutation({
    mutationFn: (previewId: string) => client.deletePreview(id, previewId),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ['previews', id] }),
  });
  return (
    <Section title="Previews">
      <form
        className="row"
        onSubmit={(ev) => {
          ev.preventDefault();
          create.mutate();
        }}
      >
        <div>
          <label htmlFor="preview-name">Preview name</label>
          <input id="preview-name" required pattern="[a-zA-Z0-9][a-zA-Z0-9\-]{0,62}" value={name} onChange={(ev) => setName(ev.target.value)} />
        </div>
        <div>
          <label htmlFor="preview-port">Port</label>
          <input id="preview-port" type="number" min={1} max={65535} required value={port} onChange={(ev) => setPort(ev.target.value)} />
        </div>
        <button type="submit" disabled={create.isPending}>
          Create preview
        </button>
      </form>
      <ErrorNote error={previews.error ?? create.error ?? remove.error} />
      <ul className="plain">
        {(previews.data ?? []).map((p) => (
          <li key={p.id}>
            {p.name} (port {p.port}) · {p.url ? <a href={p.url}>{p.url}</a> : 'no proxy on this svcd'} · <Ago unix={p.created_at} />
            <button type="button" className="small" onClick={() => remove.mutate(p.id)} aria-label={`Remove preview ${p.name}`}>
              Remove
            </button>
          </li>
        ))}
      </ul>
    </Section>
  );
}

function Sync({ id }: { id: string }) {
  const [url, setUrl] = useState('');
  const [ref, setRef] = useState('');
  const sync = useMutation({ mutationFn: () => client.sync(id, { git_url: url.trim(), git_ref: ref.trim() === '' ? undefined : ref.trim() }) });
  return (
    <Section title="Sync from git">
      <form
        className="row"
        onSubmit={(ev) => {
          ev.preventDefault();
          sync.mutate();
        }}
      >
        <div className="grow">
          <label htmlFor="sync-url">Git URL (https)</label>
          <input id="sync-url" type="url" required pattern="https://.*" value={url} onChange={(ev) => setUrl(ev.target.value)} />
        </div>
        <div>
          <label htmlFor="sync-ref">Branch, tag or commit</label>
          <input id="sync-ref" value={ref} onChange={(ev) => setRef(ev.target.value)} />
        </div>
        <button type="submit" disabled={sync.isPending}>
          {sync.isPending ? 'Syncing…' : 'Sync'}
        </button>
      </form>
      {sync.data ? (
        <p>
          Checked out <code>{sync.data.commit.slice(0, 12)}</code> at <code>{sync.data.path}</code> in {sync.data.duration_ms} ms.
        </p>
      ) : null}
      <ErrorNote error={sync.error} />
    </Section>
  );
}

