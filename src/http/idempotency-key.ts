import type { Request } from 'express';
import { AppError } from '../errors.js';
import type { Principal } from './auth/principal.js';
import { idempotencyKey } from './schemas.js';

/**
 * The request's Idempotency-Key header, checked and scoped to its caller; undefined when absent. Orders and admin
 * writes read it alike, and store and look up exactly what this returns, so a key belongs to the credential that
 * sent it: the same key from two callers names two requests, and neither learns that the other used it.
 */
export function idempotencyKeyOf(req: Request, caller: Principal): string | undefined {
  const header = req.get('idempotency-key');
  if (header === undefined) return undefined;
  const result = idempotencyKey.safeParse(header);
  if (!result.success) {
    throw new AppError('invalid_idempotency_key', 'Idempotency-Key must be 1–128 visible ASCII characters');
  }
  return `${scopeOf(caller)} ${result.data}`;
}

/**
 * Whose keys a caller shares: a customer token's customer, a service key's own (by its name), or every caller without
 * a credential. Neither part holds a space (customer ids and key names are letters, digits and `._:@-`; a key is
 * visible ASCII), so `<scope> <key>` is never the same for two pairs. migrations/20261203000000_scoped_idempotency_keys
 * writes the keys stored before this in the same form. Stock changes record it as their actor.
 */
export function scopeOf(caller: Principal): string {
  if (caller.kind === 'customer') return `customer:${caller.customerId}`;
  if (caller.kind === 'service') return `key:${caller.name}`;
  return 'anonymous';
}
