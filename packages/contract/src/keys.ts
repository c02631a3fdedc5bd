import { Type, type Static } from 'typebox';
import { UnixSeconds } from './common.js';

export const MAX_API_KEYS = 20;
/** "max about 10 years" (spec 4, API keys): ten Julian years. */
export const MAX_KEY_EXPIRES_IN = 315_576_000;
export const KEY_NAME_MAX = 128;

export const CreateKeyRequest = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: KEY_NAME_MAX, description: 'defaults to unnamed' })),
  expires_in: Type.Optional(
    Type.Integer({ exclusiveMinimum: 0, maximum: MAX_KEY_EXPIRES_IN, description: 'seconds; > 0, at most ten years' }),
  ),
});
export type CreateKeyRequest = Static<typeof CreateKeyRequest>;

const Nullable = <T extends ReturnType<typeof Type.Integer>>(t: T) => Type.Union([t, Type.Null()]);

export const CreatedKey = Type.Object({
  id: Type.String(),
  name: Type.String(),
  api_key: Type.String({ description: '<keyID>.<secret>; returned only here' }),
  prefix: Type.String(),
  created_at: UnixSeconds,
  expires_at: Nullable(UnixSeconds),
});
export type CreatedKey = Static<typeof CreatedKey>;

export const KeyInfo = Type.Object({
  id: Type.String(),
  name: Type.String(),
  prefix: Type.String(),
  created_at: UnixSeconds,
  last_used_at: Nullable(UnixSeconds),
  expires_at: Nullable(UnixSeconds),
});
export type KeyInfo = Static<typeof KeyInfo>;
export const KeyList = Type.Array(KeyInfo);

export const KeyIdParams = Type.Object({ keyID: Type.String({ minLength: 1, maxLength: 64 }) });

export const RevokedKey = Type.Object({ id: Type.String(), status: Type.Literal('revoked') });
export type RevokedKey = Static<typeof RevokedKey>;

export const RecoverRequest = Type.Object({ email: Type.String({ minLength: 1, maxLength: 256 }) });
export type RecoverRequest = Static<typeof RecoverRequest>;
export const RecoverResponse = Type.Object({ tenant_id: Type.String(), api_key: Type.String(), id: Type.String() });
export type RecoverResponse = Static<typeof RecoverResponse>;
