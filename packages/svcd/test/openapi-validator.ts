// Checks every answer a test client sees against svcd's OpenAPI document: the status must be
// documented for the operation, and a JSON body must match that status's schema. The harness
// installs it on every server it starts, so the HTTP tests keep the document honest.
import { Ajv, type ValidateFunction } from 'ajv';
import type { ObservedResponse } from '@svc/client';
import { addFormats } from '../src/api/schema-compilers.js';

interface Operation {
  responses?: Record<string, { content?: Record<string, { schema?: object }> }>;
}
export interface OpenApiDocument {
  paths: Record<string, Record<string, Operation>>;
}

/** A mismatch between an answer and the document (thrown into the request, so the test fails). */
export class OpenApiMismatch extends Error {}

export function responseValidator(doc: OpenApiDocument): (r: ObservedResponse) => void {
  const ajv = addFormats(new Ajv({ strict: false, allErrors: true }));
  const routes = Object.entries(doc.paths)
    .map(([template, ops]) => ({
      // {param} matches one path segment.
      pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}/?$`),
      params: template.split('{').length - 1,
      ops,
      template,
    }))
    // A static segment wins over a parameter, as in the router: /environments/templates is not /environments/{envID}.
    .sort((a, b) => a.params - b.params);
  const compiled = new Map<object, ValidateFunction>();

  return (r) => {
    const route = routes.find((x) => x.pattern.test(r.path));
    const op = route?.ops[r.method.toLowerCase()];
    // Unknown paths (404) and known paths with another method (405) have no operation to check.
    if (!route || !op) return;
    const where = `${r.method} ${route.template} -> ${r.status}`;
    const documented = op.responses?.[String(r.status)];
    if (!documented) throw new OpenApiMismatch(`${where}: status not in the OpenAPI document (${Object.keys(op.responses ?? {}).join(', ')})`);
    if (r.body === null || !r.contentType.includes('json')) return; // streams and text/plain
    const schema = documented.content?.['application/json']?.schema;
    if (!schema) throw new OpenApiMismatch(`${where}: JSON answer, but the document gives no JSON schema`);
    let validate = compiled.get(schema);
    if (!validate) compiled.set(schema, (validate = ajv.compile(schema)));
    if (!validate(r.body)) {
      throw new OpenApiMismatch(`${where}: body does not match the document: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(r.body).slice(0, 300)}`);
    }
  };
}
