// Sign in with an API key (exchanged at once for a session cookie; the page keeps no key), or
// register a tenant when the server allows it (open registration in --dev, or a bootstrap token).
import { useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import { client, sessionQuery, setCsrfToken } from '../api.js';
import { ErrorNote, Secret } from '../ui.js';

export function SignIn() {
  const queryClient = useQueryClient();
  const [apiKey, setApiKey] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [registered, setRegistered] = useState<string | null>(null);

  async function startSession(key: string) {
    const session = await client.createSession(key);
    setCsrfToken(session.csrf_token);
    // Nothing read under an earlier session (another tenant's, perhaps) stays on screen. The
    // session's own query stays: the page's gate watches it.
    queryClient.removeQueries({ predicate: (q) => q.queryKey[0] !== sessionQuery.queryKey[0] });
    queryClient.setQueryData(sessionQuery.queryKey, session);
  }

  async function onSignIn(e: SyntheticEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await startSession(apiKey.trim());
      setApiKey('');
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <div className="narrow">
      <h1>Sign in</h1>
      {registered ? (
        <section className="card" aria-labelledby="new-key">
          <h2 id="new-key">Your tenant is registered</h2>
          <Secret label="API key" value={registered} note="Copy it now: it is shown only once. The CLI and scripts use it; this page signs in with it." />
          <button
            type="button"
            disabled={busy}
            onClick={() => {
              setBusy(true);
              void startSession(registered)
                .catch(setError)
                .finally(() => setBusy(false));
            }}
          >
            Continue to the dashboard
          </button>
        </section>
      ) : (
        <form className="card" onSubmit={(e) => void onSignIn(e)}>
          <label htmlFor="api-key">API key</label>
          <input id="api-key" type="password" autoComplete="off" required value={apiKey} onChange={(e) => setApiKey(e.target.value)} placeholder="keyID.secret" />
          <p className="hint">The key is exchanged for a session cookie and is not kept by this page.</p>
          <button type="submit" disabled={busy}>
            Sign in
          </button>
        </form>
      )}
      <ErrorNote error={error} />
      {registered ? null : <Register onRegistered={setRegistered} />}
    </div>
  );
}

function Register({ onRegistered }: { onRegistered: (apiKey: string) => void }) {
  const [name, setName] = useState('');
  const [email, setEmail] = useState('');
  const [token, setToken] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  async function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    client.bootstrapToken = token.trim() === '' ? undefined : token.trim();
    try {
      const r = await client.register({ name: name.trim(), email: email.trim() });
      onRegistered(r.api_key);
    } catch (err) {
      setError(err);
    } finally {
      client.bootstrapToken = undefined;
      setBusy(false);
    }
  }

  return (
    <details className="card">
      <summary>Register a new tenant</summary>
      <form onSubmit={(e) => void onSubmit(e)}>
        <label htmlFor="reg-name">Name</label>
        <input id="reg-name" required minLength={2} maxLength={128} value={name} onChange={(e) => setName(e.target.value)} />
        <label htmlFor="reg-email">Email</label>
        <input id="reg-email" type="email" required maxLength={256} value={email} onChange={(e) => setEmail(e.target.value)} />
        <label htmlFor="reg-token">Bootstrap token</label>
        <input id="reg-token" type="password" autoComplete="off" value={token} onChange={(e) => setToken(e.target.value)} />
        <p className="hint">Leave it empty when the server has open registration.</p>
        <button type="submit" disabled={busy}>
          Register
        </button>
        <ErrorNote error={error} />
      </form>
    </details>
  );
}
