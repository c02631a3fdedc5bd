// Small pieces every page uses: how an error, a status, a time, a gauge and a page of a list look.
import { useEffect, useState, type ReactNode } from 'react';
import { messageOf } from './api.js';

/** The API's message of a failed call, announced to screen readers. */
export function ErrorNote({ error }: { error: unknown }) {
  if (error === null || error === undefined) return null;
  return (
    <p className="error" role="alert">
      {messageOf(error)}
    </p>
  );
}

const STATUS_TONE: Record<string, string> = {
  running: 'good',
  succeeded: 'good',
  active: 'good',
  ok: 'good',
  deploying: 'busy',
  provisioning: 'busy',
  creating: 'busy',
  queued: 'busy',
  pending: 'busy',
  failed: 'bad',
  crashed: 'bad',
  degraded: 'bad',
  suspended: 'bad',
};

export function Status({ value }: { value: string }) {
  return <span className={`status ${STATUS_TONE[value] ?? 'idle'}`}>{value}</span>;
}

/** "3 min ago" / "in 2 h", with the local date and time on hover and for screen readers. */
export function Ago({ unix }: { unix: number | null }) {
  const now = useNow(30_000);
  if (unix === null) return <span>never</span>;
  const date = new Date(unix * 1000);
  return (
    <time dateTime={date.toISOString()} title={date.toLocaleString()}>
      {relative(unix - now / 1000)}
    </time>
  );
}

export function relative(deltaSeconds: number): string {
  const abs = Math.abs(deltaSeconds);
  const [n, unit] =
    abs < 60 ? [Math.round(abs), 's'] : abs < 3600 ? [Math.round(abs / 60), 'min'] : abs < 86_400 ? [Math.round(abs / 3600), 'h'] : [Math.round(abs / 86_400), 'd'];
  if (abs < 5) return 'just now';
  return deltaSeconds < 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`;
}

/** The current time, re-read every `everyMs` (countdowns, "ago"). */
export function useNow(everyMs: number): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(t);
  }, [everyMs]);
  return now;
}

/** Used against its quota, as a native meter (read out as a value by screen readers). */
export function Gauge({ label, used, max, unit }: { label: string; used: number; max: number; unit?: string }) {
  const id = `gauge-${label.replace(/\W+/g, '-')}`;
  return (
    <div className="gauge">
      <label htmlFor={id}>{label}</label>
      <meter id={id} min={0} max={Math.max(max, 1)} value={used} high={max * 0.8} optimum={0}>
        {used} of {max}
      </meter>
      <span className="figure">
        {used} / {max}
        {unit ? ` ${unit}` : ''}
      </span>
    </div>
  );
}

/** Previous and next for limit/offset lists (the API clamps limit to 200). */
export function Pager({ offset, limit, count, onChange, label = 'Pages' }: { offset: number; limit: number; count: number; onChange: (offset: number) => void; label?: string }) {
  if (offset === 0 && count < limit) return null;
  return (
    // A page with several lists names each one's pages apart (landmarks are told by their labels).
    <nav className="pager" aria-label={label}>
      <button type="button" disabled={offset === 0} onClick={() => onChange(Math.max(0, offset - limit))}>
        Previous
      </button>
      <span>
        {count === 0 ? 'none' : `${offset + 1}–${offset + count}`}
      </span>
      <button type="button" disabled={count < limit} onClick={() => onChange(offset + limit)}>
        Next
      </button>
    </nav>
  );
}

export function Section({ title, children, actions }: { title: string; children: ReactNode; actions?: ReactNode }) {
  const id = `section-${title.replace(/\W+/g, '-').toLowerCase()}`;
  return (
    <section className="card" aria-labelledby={id}>
      <div className="card-head">
        <h2 id={id}>{title}</h2>
        {actions}
      </div>
      {children}
    </section>
  );
}

/** A secret shown once or revealed on request, with a copy button and what to know about it. */
export function Secret({ label, value, note }: { label: string; value: string; note?: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="secret">
      <span className="secret-label">{label}</span>
      <code aria-label={label}>{value}</code>
      <button
        type="button"
        onClick={() => {
          void navigator.clipboard.writeText(value).then(() => setCopied(true), () => setCopied(false));
        }}
      >
        {copied ? 'Copied' : 'Copy'}
      </button>
      {note ? <p className="hint">{note}</p> : null}
    </div>
  );
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/**
 * A table that scrolls sideways on a narrow screen: a focusable, named region, so that a
 * keyboard can scroll it too.
 */
export function TableWrap({ label, children }: { label: string; children: ReactNode }) {
  return (
    <div className="table-wrap" role="region" aria-label={label} tabIndex={0}>
      {children}
    </div>
  );
}

/**
 * A button whose action is asked about first (deletes, revokes, audit-logged reveals): the
 * browser's own dialog, which every assistive technology knows.
 */
export function ConfirmButton({
  question,
  onConfirm,
  pending = false,
  danger = false,
  small = false,
  label,
  children,
}: {
  question: string;
  onConfirm: () => void;
  pending?: boolean;
  danger?: boolean;
  small?: boolean;
  /** An accessible name when the visible text alone is ambiguous in a list. */
  label?: string;
  children: ReactNode;
}) {
  const className = [danger ? 'danger' : '', small ? 'small' : ''].filter(Boolean).join(' ') || undefined;
  return (
    <button
      type="button"
      className={className}
      disabled={pending}
      aria-label={label}
      onClick={() => {
        if (window.confirm(question)) onConfirm();
      }}
    >
      {children}
    </button>
  );
}
