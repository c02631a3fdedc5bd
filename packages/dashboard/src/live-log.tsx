// A followed log (a service's or a build's), shown as it arrives. The stream is read with
// backpressure (one chunk at a time) and the page keeps only the last lines, so a chatty service
// cannot grow the tab's memory without bound. Leaving the view aborts the request, which ends the
// follow on svcd too.
import { useEffect, useRef, useState } from 'react';
import { ApiError } from '@svc/client';
import { messageOf } from './api.js';

const KEEP_LINES = 2_000;
/** Output without a newline (a progress bar's carriage returns) is cut into lines this long. */
const LINE_MAX_CHARS = 64 * 1024;
const RECONNECT_FIRST_MS = 2_000;
const RECONNECT_MAX_MS = 30_000;
/** Within this of the bottom, the view follows new lines; scrolled further up, it stays put. */
const STICK_PX = 24;

interface Line {
  n: number;
  text: string;
}

/**
 * `reconnect`: a service's follow ends when its container is replaced (a restart, a deploy); the
 * view then follows the new one, after a pause that grows while nothing comes. A refusal (4xx:
 * signed out, not found, too many streams) is shown and not retried. A build's log ends with the
 * build: no reconnect.
 */
export function LiveLog({
  label,
  open,
  active,
  reconnect = false,
}: {
  label: string;
  open: (signal: AbortSignal) => Promise<ReadableStream<Uint8Array>>;
  active: boolean;
  reconnect?: boolean;
}) {
  const [lines, setLines] = useState<Line[]>([]);
  const [state, setState] = useState<'connecting' | 'live' | 'ended' | 'paused'>('connecting');
  const [error, setError] = useState<string | null>(null);
  const [attempt, setAttempt] = useState(0);
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  const counter = useRef(0);
  const delay = useRef(RECONNECT_FIRST_MS);

  // Another source (another build): start from nothing.
  useEffect(() => {
    setLines([]);
    delay.current = RECONNECT_FIRST_MS;
  }, [open]);

  useEffect(() => {
    if (!active) {
      setState('paused');
      return;
    }
    const abort = new AbortController();
    let retry: ReturnType<typeof setTimeout> | undefined;
    const append = (texts: string[]) => {
      if (texts.length === 0) return;
      setLines((old) => [...old, ...texts.map((text) => ({ n: counter.current++, text }))].slice(-KEEP_LINES));
    };
    setError(null);
    setState('connecting');
    void (async () => {
      let refused = false;
      try {
        const body = await open(abort.signal);
        setState('live');
        const reader = body.getReader();
        // stream: true keeps a character split between two chunks whole.
        const decoder = new TextDecoder();
        let partial = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          delay.current = RECONNECT_FIRST_MS;
          const parts = (partial + decoder.decode(value, { stream: true })).split('\n');
          partial = parts.pop() ?? '';
          while (partial.length > LINE_MAX_CHARS) {
            parts.push(partial.slice(0, LINE_MAX_CHARS));
            partial = partial.slice(LINE_MAX_CHARS);
          }
          append(parts);
        }
        partial += decoder.decode();
        if (partial !== '') append([partial]);
        setState('ended');
      } catch (err) {
        if (abort.signal.aborted) return;
        refused = err instanceof ApiError && err.status >= 400 && err.status < 500;
        setError(messageOf(err));
        setState('ended');
      }
      if (reconnect && !refused && !abort.signal.aborted) {
        retry = setTimeout(() => setAttempt((n) => n + 1), delay.current);
        delay.current = Math.min(delay.current * 2, RECONNECT_MAX_MS);
      }
    })();
    return () => {
      abort.abort();
      clearTimeout(retry);
    };
  }, [open, active, reconnect, attempt]);

  useEffect(() => {
    const el = box.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [lines]);

  return (
    <div className="live-log">
      <p className="hint" aria-live="polite">
        {state === 'live' ? 'Streaming live' : state === 'connecting' ? 'Connecting…' : state === 'paused' ? 'Paused' : 'Stream ended'}
      </p>
      {error ? (
        <p className="error" role="alert">
          {error}
        </p>
      ) : null}
      {/* One element per line: a screen reader announces the lines added, not the whole log again. */}
      <div
        ref={box}
        className="log-lines"
        role="log"
        aria-label={label}
        tabIndex={0}
        onScroll={(e) => {
          const el = e.currentTarget;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight <= STICK_PX;
        }}
      >
        {lines.map((l) => (
          <div key={l.n}>{l.text === '' ? '\u00a0' : l.text}</div>
        ))}
      </div>
    </div>
  );
}
