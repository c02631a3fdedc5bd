// Reading and writing the dashboard's session cookie (auth/web-sessions.ts). jshttp's `cookie`
// does the parsing and the Set-Cookie syntax (quoting, attributes), as Fastify's cookie plugin
// would, without a hook that parses the Cookie header of every request: only key routes that
// come without an Authorization header look at it.
import { parseCookie, stringifySetCookie } from 'cookie';
import { SESSION_COOKIE } from '@svc/contract';

/** The session cookie's value, or undefined when there is none (or it is empty). */
export function sessionCookieOf(cookieHeader: string | undefined): string | undefined {
  if (cookieHeader === undefined || !cookieHeader.includes(SESSION_COOKIE)) return undefined;
  const value = parseCookie(cookieHeader)[SESSION_COOKIE];
  return value === '' ? undefined : value;
}

/**
 * HttpOnly (script cannot read it), SameSite=Strict (no cross-site request carries it), Path=/
 * (the pages and the API), Secure outside --dev (svc serves HTTPS there; in --dev the browser
 * reaches a plain loopback listener). It expires with the session.
 */
export function sessionSetCookie(value: string, expiresAt: number, secure: boolean): string {
  return stringifySetCookie({
    name: SESSION_COOKIE,
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
  return stringifySetCookie({ name: SESSION_COOKIE, value: '', httpOnly: true, sameSite: 'strict', secure, path: '/', maxAge: 0 });
}
