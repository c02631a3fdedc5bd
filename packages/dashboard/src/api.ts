// The one client of the page. It never holds an API key: the browser sends the session cookie
// (HttpOnly, so this code cannot read it), and the session's CSRF token goes with every request
// in a header, kept in this module's memory only.
import { queryOptions } from '@tanstack/react-query';
import { ApiError, CSRF_HEADER, SvcClient } from '@svc/client';

export const client = new SvcClient({ baseUrl: window.location.origin });

/** The session's CSRF token, sent from now on; null after sign-out. */
export function setCsrfToken(token: string | null): void {
  if (token === null) Reflect.deleteProperty(client.headers, CSRF_HEADER);
  else client.headers[CSRF_HEADER] = token;
}

/** What to show a person for a failed call: the API's own message. */
export function messageOf(err: unknown): string {
  if (err instanceof ApiError) return `${err.message} (HTTP ${err.status})`;
  if (err instanceof Error) return err.message;
  return String(err);
}

/** A 401: the session ended (signed out elsewhere, key revoked, tenant suspended). */
export function isSignedOut(err: unknown): boolean {
  return err instanceof ApiError && err.status === 401;
}

/**
 * The operator's admin token, typed once on the operator page and held in this tab's memory
 * only: never stored, gone on reload.
 */
export const operator = new SvcClient({ baseUrl: window.location.origin });

/** The session of this tab (404 or 401 when there is none); reading it sets the CSRF header. */
export const sessionQuery = queryOptions({
  queryKey: ['session'],
  queryFn: async () => {
    const s = await client.session();
    setCsrfToken(s.csrf_token);
    return s;
  },
});
