import type { Request } from 'express';
import { AppError } from '../errors.js';
import { idempotencyKey } from './schemas.js';

/** The request's Idempotency-Key header, checked; undefined when absent. Orders and admin writes read it alike. */
export function idempotencyKeyOf(req: Request): string | undefined {
  const header = req.get('idempotency-key');
  if (header === undefined) return undefined;
  const result = idempotencyKey.safeParse(header);
  if (!result.success) {
    throw new AppError('invalid_idempotency_key', 'Idempotency-Key must be 1–128 visible ASCII characters');
  }
  return result.data;
}
