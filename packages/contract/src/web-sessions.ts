import { Type, type Static } from 'typebox';
import { UnixSeconds } from './common.js';
import { CSRF_HEADER } from './limits.js';

// Sign-in sessions of the dashboard (beyond the spec, additive). A page never holds an API key:
// it exchanges one for a session cookie (HttpOnly, SameSite=Strict, Secure outside --dev), and
// sends the session's CSRF token in a header on every request that changes something.

export { CSRF_HEADER, DEV_SESSION_COOKIE, SESSION_COOKIE, SESSION_TTL_SECONDS } from './limits.js';

export const CreateSessionRequest = Type.Object(
  { api_key: Type.String({ minLength: 1, maxLength: 256, description: '<keyID>.<secret>; used once, never stored by the page' }) },
  { additionalProperties: false },
);
export type CreateSessionRequest = Static<typeof CreateSessionRequest>;

export const WebSession = Type.Object({
  tenant_id: Type.String(),
  key_id: Type.String({ description: 'the API key the session came from: revoking it ends the session' }),
  expires_at: UnixSeconds,
  csrf_token: Type.String({ description: `send it as ${CSRF_HEADER} on every request that changes something` }),
});
export type WebSession = Static<typeof WebSession>;

export const EndedSession = Type.Object({ status: Type.Literal('signed_out') });
export type EndedSession = Static<typeof EndedSession>;
