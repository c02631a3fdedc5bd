// Reading and writing the dashboard's session cookie (auth/web-sessions.ts). jshttp's `cookie`
// does the Set-Cookie syntax (quoting, attributes), as Fastify's cookie plugin would, without a
// hook that parses the Cookie header of every request: only key routes that come without an
// Authorization header look at it.
import { parseCookie, stringifySetCookie } from 'cookie';
import { DEV_SESSION_COOKIE, SESSION_COOKIE } from '@svc/contract';

/** What a request's Cookie header says about the session cookie. */
export type PresentedSession = { kind: 'none' } | { kind: 'one'; value: string } | { kind: 'several' };

/** The cookie's name: `__Host-` outside --dev (contract, limits.ts). */
export function sessionCookieName(secure: boolean): string {
  return secure ? SESSION_COOKIE : DEV_SESSION_COOKIE;
}

/**
 * The session cookie of a request. More than one of that name is refused rather than resolved:
 * a browser sends every cookie whose domain and path match, so a second one was set by someone
 * else (a sibling host, a narrower path), and whichever came first would win.
 */
export function presentedSession(cookieHeader: string | undefined, name: string): PresentedSession {
  if (cookieHeader === undefined || !cookieHeader.includes(name)) return { kind: 'none' };
  const count = cookieHeader.split(';').filter((pair) => pair.trimStart().startsWith(`${name}=`)).length;
  if (count > 1) return { kind: 'several' };
  const value = parseCookie(cookieHeader)[name];
  return value === undefined || value === '' ? { kind: 'none' } : { kind: 'one', value };
}

/**
 * HttpOnly (script cannot read it), SameSite=Strict (no cross-site request carries it), Path=/
 * (the pages and the API), Secure outside --dev (svc serves HTTPS there; in --dev the browser
 * reaches a plain loopback listener). It expires with the session.
 */
export function sessionSetCookie(value: string, expiresAt: number, secure: boolean): string {
  return stringifySetCookie({
    name: sessionCookieName(secure),
    value,
    httpOnly: true,
    sameSite: 'strict',
    secure,
    path: '/',
    expires: new Date(expiresAt * 1000),
  });
}

/** Tells the browser to drop the cookie (sign-out, or a session that no longer holds). */
export function clearedSessionCookie(secure: boolean): string {
  return stringifySetCookie({ name: sessionCookieName(secure), value: '', httpOnly: true, sameSite: 'strict', secure, path: '/', maxAge: 0 });
}
