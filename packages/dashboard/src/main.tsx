import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { MutationCache, QueryCache, QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { isSignedOut, sessionQuery } from './api.js';
import { App } from './App.js';
import './styles.css';

/**
 * A 401 anywhere means the session ended (signed out elsewhere, its key revoked or expired, the
 * tenant suspended): the session is read again, and the page goes back to sign-in.
 */
function onError(err: unknown): void {
  if (isSignedOut(err)) void queryClient.invalidateQueries({ queryKey: sessionQuery.queryKey });
}

const queryClient: QueryClient = new QueryClient({
  // Not for the session's own read: its 401 is the answer, and reading it again would loop.
  queryCache: new QueryCache({ onError: (err, query) => (query.queryKey[0] === sessionQuery.queryKey[0] ? undefined : onError(err)) }),
  mutationCache: new MutationCache({ onError }),
  defaultOptions: {
    // A failed read shows its error at once: the API's message says what is wrong, and a 4xx
    // does not get better by asking again.
    queries: { retry: false, refetchOnWindowFocus: true, staleTime: 2_000 },
  },
});

const root = document.getElementById('root');
if (root) {
  createRoot(root).render(
    <StrictMode>
      <QueryClientProvider client={queryClient}>
        <App />
      </QueryClientProvider>
    </StrictMode>,
  );
}
