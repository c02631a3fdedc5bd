// The route schemas' compiled validators and response serializers. Fastify compiles them for
// every server it builds (about half a second for svcd's routes here); a process that builds
// many servers (a test file: one per suite) passes one SchemaCompilers to all of them, and each
// schema is compiled once. A compiled function depends on its schema alone (no schema is added
// to the servers by $id), so sharing it between servers changes nothing they answer.
import { Ajv, type Options as AjvOptions } from 'ajv';
import addFormatsModule from 'ajv-formats';
// Fastify's own serializer compiler (@fastify/fast-json-stringify-compiler) is this library
// called with the server's added schemas, which svcd has none of: called directly, its result
// can be kept by schema.
import fastJsonStringify from 'fast-json-stringify';

// ajv-formats is published as CommonJS with a default export; under NodeNext it arrives wrapped.
export const addFormats = ((addFormatsModule as unknown as { default?: typeof addFormatsModule }).default ??
  addFormatsModule) as unknown as (ajv: Ajv) => Ajv;

type Serializer = (data: unknown) => string;

export class SchemaCompilers {
  /**
   * Two validators: bodies are checked strictly (a string "5" is not the integer 5: the quota
   * patch takes integers only), while query strings and path parameters, which are always text
   * on the wire, are coerced to their declared types. Each Ajv keeps what it compiled by schema.
   */
  private readonly strictAjv: Ajv;
  private readonly coercingAjv: Ajv;
  private readonly serializers = new WeakMap<object, Serializer>();

  constructor() {
    const base: AjvOptions = { allErrors: false, useDefaults: true, strict: false };
    this.strictAjv = addFormats(new Ajv({ ...base, coerceTypes: false, removeAdditional: false }));
    this.coercingAjv = addFormats(new Ajv({ ...base, coerceTypes: true, removeAdditional: false }));
  }

  /** For Fastify's setValidatorCompiler. */
  readonly validator = ({ schema, httpPart }: { schema: object; httpPart?: string }) =>
    (httpPart === 'body' ? this.strictAjv : this.coercingAjv).compile(schema);

  /** For Fastify's setSerializerCompiler. */
  readonly serializer = ({ schema }: { schema: unknown }): Serializer => {
    // A boolean schema (JSON Schema allows one) cannot key a WeakMap: compiled each time.
    if (typeof schema !== 'object' || schema === null) return fastJsonStringify(schema as object) as Serializer;
    let serialize = this.serializers.get(schema);
    if (!serialize) {
      serialize = fastJsonStringify(schema) as Serializer;
      this.serializers.set(schema, serialize);
    }
    return serialize;
  };
}
