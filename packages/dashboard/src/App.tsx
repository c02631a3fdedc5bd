// The page's frame: the sign-in gate, then the navigation and the current view.
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';
import { client, isSignedOut, sessionQuery, setCsrfToken } from './api.js';
import { href, useRoute, type Route } from './router.js';
import { ErrorNote } from './ui.js';
import { SignIn } from './pages/SignIn.js';
import { Overview } from './pages/Overview.js';
import { Services } from './pages/Services.js';
import { ServiceDetail } from './pages/ServiceDetail.js';
import { Databases } from './pages/Databases.js';
import { Environments } from './pages/Environments.js';
import { EnvironmentDetail } from './pages/EnvironmentDetail.js';
import { Board } from './pages/Board.js';
import { Keys } from './pages/Keys.js';
import { Activity } from './pages/Activity.js';
import { Operator } from './pages/Operator.js';

const NAV: Array<{ label: string; route: Route; matches: Array<Route['page']> }> = [
  { label: 'Overview', route: { page: 'overview' }, matches: ['overview'] },
  { label: 'Services', route: { page: 'services' }, matches: ['services', 'service'] },
  { label: 'Databases', route: { page: 'databases' }, matches: ['databases'] },
  { label: 'Environments', route: { page: 'environments' }, matches: ['environments', 'environment'] },
  { label: 'Task board', route: { page: 'board' }, matches: ['board'] },
  { label: 'API keys', route: { page: 'keys' }, matches: ['keys'] },
  { label: 'Activity', route: { page: 'activity' }, matches: ['activity'] },
  { label: 'Operator', route: { page: 'operator' }, matches: ['operator'] },
];

export function App() {
  const route = useRoute();
  const session = useQuery(sessionQuery);
  // The operator's pages need no tenant session: the admin token is their credential.
  if (route.page === 'operator' && !session.data) {
    return (
      <Frame route={route} signedIn={false}>
        <Operator />
      </Frame>
    );
  }
  if (session.isPending) return <p className="loading">Loading…</p>;
  // A failed re-read (a network blip on window focus) keeps a session the page already has;
  // only a 401, or no session at all, means signing in.
  if (session.isError && (!session.data || isSignedOut(session.error))) {
    return (
      <Frame route={route} signedIn={false}>
        {isSignedOut(session.error) ? null : <ErrorNote error={session.error} />}
        <SignIn />
      </Frame>
    );
  }
  return (
    <Frame route={route} signedIn>
      <View route={route} />
    </Frame>
  );
}

function View({ route }: { route: Route }) {
  switch (route.page) {
    case 'overview':
      return <Overview />;
    case 'services':
      return <Services />;
    // Keyed by id: another service's page starts afresh (no revealed values, history or input carried over).
    case 'service':
      return <ServiceDetail key={route.id} id={route.id} />;
    case 'databases':
      return <Databases />;
    case 'environments':
      return <Environments />;
    case 'environment':
      return <EnvironmentDetail key={route.id} id={route.id} />;
    case 'board':
      return <Board />;
    case 'keys':
      return <Keys />;
    case 'activity':
      return <Activity />;
    case 'operator':
      return <Operator />;
  }
}

function Frame({ route, signedIn, children }: { route: Route; signedIn: boolean; children: React.ReactNode }) {
  const queryClient = useQueryClient();
  const label = NAV.find((n) => n.matches.includes(route.page))?.label ?? 'Overview';
  const first = useRef(true);
  useEffect(() => {
    document.title = `${signedIn ? label : 'Sign in'} · svc`;
    // After a navigation, focus goes to the new content (not left on a link of the old page);
    // the first load leaves it where the browser put it.
    if (first.current) first.current = false;
    else document.getElementById('main')?.focus();
  }, [label, signedIn, route]);
  const [error, setError] = useState<unknown>(null);
  const tenant = useQuery({ queryKey: ['tenant'], queryFn: () => client.tenant(), enabled: signedIn });
  async function signOut() {
    try {
      await client.endSession();
    } catch (err) {
      if (!isSignedOut(err)) {
        setError(err);
        return;
      }
    }
    // A fresh load: nothing of this tenant's data (or the operator's token) stays in the tab.
    setCsrfToken(null);
    queryClient.clear();
    window.location.replace('/');
  }
  const nav = signedIn ? NAV : NAV.filter((n) => n.route.page === 'operator' || n.route.page === 'overview');
  return (
    <>
      {/* Not href="#main": the hash is the route. */}
      <a
        className="skip"
        href="#main"
        onClick={(e) => {
          e.preventDefault();
          document.getElementById('main')?.focus();
        }}
      >
        Skip to content
      </a>
      <header className="top">
        <a className="brand" href="#/">
          svc
        </a>
        <nav aria-label="Main">
          <ul>
            {nav.map((n) => (
              <li key={n.label}>
                <a href={href(n.route)} aria-current={n.matches.includes(route.page) ? 'page' : undefined}>
                  {signedIn || n.route.page !== 'overview' ? n.label : 'Sign in'}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        {signedIn ? (
          <div className="who">
            <span>{tenant.data?.name ?? ''}</span>
            <button type="button" onClick={() => void signOut()}>
              Sign out
            </button>
          </div>
        ) : null}
      </header>
      <main id="main" tabIndex={-1}>
        <ErrorNote error={error} />
        {children}
      </main>
    </>
  );
}
