import { z } from 'zod';
import type { Scope } from '../api-keys-file.js';
import { type ErrorCode, errorCatalog } from '../errors.js';
import { idempotencyKey, orderId, skuName } from './schemas.js';

/**
 * What the OpenAPI document's operations (src/http/openapi.ts) are built from: their error responses, security
 * requirements, parameters and bodies.
 */

/** A schema embedded in the document, without the dialect marker a standalone JSON Schema carries. */
export function schemaOf(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema);
  return rest;
}

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
export const json = (id: string) => ({ 'application/json': { schema: ref(id) } });

/** Error responses by status, each listing the codes it may carry. */
export function problems(...codes: ErrorCode[]): Record<string, unknown> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = errorCatalog[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      String(status),
      {
        description: list.map((code) => `\`${code}\`: ${errorCatalog[code].title}`).join('; '),
        content: { 'application/problem+json': { schema: ref('Problem') } },
      },
    ]),
  );
}

export const ALWAYS: ErrorCode[] = ['method_not_allowed', 'shutting_down', 'internal'];
export const WRITE: ErrorCode[] = ['bad_request', 'invalid_json', 'body_too_large', 'unsupported_media_type'];
export const AUTH: ErrorCode[] = ['unauthorized', 'invalid_token', 'forbidden'];
export const ADMIN: ErrorCode[] = [...AUTH, 'invalid_idempotency_key', 'idempotency_key_reused'];

/**
 * Who may call an operation: a service key holding one of `scopes`, and/or a customer token (for its own customer's
 * orders only). Either is a bearer credential; the array of a scheme lists the scopes it needs. `openUntilKeys`: the
 * operation is open to callers without a credential until API_KEYS_FILE or a customer issuer is configured (with
 * ADMIN_TOKEN alone), so the credential is optional (`{}`, the empty requirement).
 */
export const security = (scopes: Scope[], customer: boolean, openUntilKeys = false) => [
  ...(scopes.length > 0 ? scopes.map((scope) => ({ serviceKey: [scope] })) : [{ serviceKey: [] }]),
  ...(customer ? [{ customerToken: [] }] : []),
  ...(openUntilKeys ? [{}] : []),
];
export const adminSecurity = security(['stock:admin'], false);
export const monitoringSecurity = security(['metrics:read'], false);
export const eventsSecurity = security(['events:read'], false);
export const webhooksSecurity = security(['webhooks:manage'], false);
/** Query parameters; a list is written comma-separated (`types=a,b`), as the README does (repeating it works too). */
export const queryParameters = (shape: Record<string, z.ZodType>) =>
  Object.entries(shape).map(([name, schema]) => {
    const json = schemaOf(schema);
    return {
      name,
      in: 'query',
      required: !schema.safeParse(undefined).success,
      ...(json.type === 'array' && { style: 'form', explode: false }),
      schema: json,
    };
  });
export const webhookIdParameter = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', format: 'uuid' },
};
export const OPEN_UNTIL_KEYS =
  ' Open to every caller until `API_KEYS_FILE` or a customer issuer is configured, as with `ADMIN_TOKEN` alone.';
export const skuParameter = { name: 'sku', in: 'path', required: true, schema: schemaOf(skuName) };
export const idempotencyParameter = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description:
    'Repeating the request with the same key answers as the first did, and changes nothing more. A key belongs to its caller (customer token, service key, or callers without a credential together): the same key from another caller is another request.',
  schema: schemaOf(idempotencyKey),
};
export const orderIdParameter = { name: 'id', in: 'path', required: true, schema: schemaOf(orderId) };
export const body = (id: string) => ({ required: true, content: json(id) });
