import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ConfigError } from './errors.js';

/** What a service credential may be granted (docs/operations.md#who-may-do-what). */
export const SCOPES = [
  'orders:place',
  'orders:read',
  'orders:manage',
  'stock:admin',
  'metrics:read',
  'events:read',
  'webhooks:manage',
] as const;
export type Scope = (typeof SCOPES)[number];

/** One service key of API_KEYS_FILE: its name (for logs and rate limits), the SHA-256 of the key, its scopes. */
export interface ApiKey {
  readonly name: string;
  readonly sha256: Buffer;
  readonly scopes: readonly Scope[];
}

const apiKeysFile = z
  .array(
    z.strictObject({
      name: z.string().regex(/^[A-Za-z0-9._:@-]{1,64}$/, 'name: 1–64 characters of letters, digits and . _ : @ -'),
      sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, "sha256: the 64 hex digits of the key's SHA-256"),
      scopes: z.array(z.enum(SCOPES)).min(1),
    }),
  )
  .min(1)
  .refine((keys) => new Set(keys.map((key) => key.name)).size === keys.length, 'names must be distinct')
  .refine(
    (keys) => new Set(keys.map((key) => key.sha256.toLowerCase())).size === keys.length,
    'each key must be listed once',
  );
/** Reads and checks API_KEYS_FILE once, at start: a service with a broken key file does not start. */
export function readApiKeys(file: string): readonly ApiKey[] {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new ConfigError(`invalid API_KEYS_FILE: ${(error as Error).message}`);
  }
  const parsed = apiKeysFile.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length > 0 ? ` at ${issue.path.join('.')}` : '';
    throw new ConfigError(`invalid API_KEYS_FILE${where}: ${issue.message}`);
  }
  return Object.freeze(
    parsed.data.map((key) =>
      Object.freeze({ name: key.name, sha256: Buffer.from(key.sha256, 'hex'), scopes: Object.freeze(key.scopes) }),
    ),
  );
}
