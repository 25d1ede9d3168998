import type { z } from 'zod';
import { AppError } from '../errors.js';

/** Parses untrusted input; the problem detail names the first offending field. */
export function parseOr400<T extends z.ZodType>(schema: T, input: unknown, what: string): z.output<T> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const field = issue.path.length > 0 ? issue.path.join('.') : what;
  throw new AppError('bad_request', `${field}: ${issue.message}`);
}
