// A followed log (a service's or a build's), shown as it arrives. The stream is read with
// backpressure (one chunk at a time) and the page keeps only the last lines, so a chatty service
// cannot grow the tab's memory without bound. Leaving the view aborts the request, which ends the
// follow on svcd too.
import { useEffect, useRef, useState } from 'react';
import { messageOf } from './api.js';

const KEEP_LINES = 2_000;
const RECONNECT_MS = 2_000;

/**
 * `reconnect`: a service's follow ends when its container is replaced (a restart, a deploy); the
 * view then follows the new one after a pause. A build's log ends with the build: no reconnect.
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
  const [attempt, setAttempt] = useState(0);
  const [lines, setLines] = useState<string[]>([]);
  const [state, setState] = useState<'connecting' | 'live' | 'ended' | 'paused'>('connecting');
  const [error, setError] = useState<string | null>(null);
  const box = useRef<HTMLPreElement>(null);

  useEffect(() => {
    if (!active) {
      setState('paused');
      return;
    }
    const abort = new AbortController();
    let retry: ReturnType<typeof setTimeout> | undefined;
    setLines([]);
    setError(null);
    setState('connecting');
    void (async () => {
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
          const parts = (partial + decoder.decode(value, { stream: true })).split('\n');
          partial = parts.pop() ?? '';
          if (parts.length > 0) setLines((old) => [...old, ...parts].slice(-KEEP_LINES));
        }
        if (partial !== '') setLines((old) => [...old, partial].slice(-KEEP_LINES));
        setState('ended');
      } catch (err) {
        if (abort.signal.aborted) return;
        setError(messageOf(err));
        setState('ended');
      }
      if (reconnect && !abort.signal.aborted) retry = setTimeout(() => setAttempt((n) => n + 1), RECONNECT_MS);
    })();
    return () => {
      abort.abort();
      clearTimeout(retry);
    };
  }, [open, active, reconnect, attempt]);

  useEffect(() => {
    const el = box.current;
    if (el) el.scrollTop = el.scrollHeight;
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
      <pre ref={box} role="log" aria-label={label} tabIndex={0}>
        {lines.join('\n')}
      </pre>
    </div>
  );
}
