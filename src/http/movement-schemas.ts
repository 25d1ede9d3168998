import { z } from 'zod';
import { MOVEMENT_KINDS } from '../stock/movement.js';
import { wholeNumberParameter } from './schemas.js';

/** `kind=order,cancel`: a comma-separated list of movement kinds, as the feed's `types` is written. */
const kindList = z.preprocess(
  (value) => (typeof value === 'string' ? value.split(',').map((kind) => kind.trim()) : value),
  z.array(z.enum(MOVEMENT_KINDS)).min(1),
);

/** An instant of the history's filters: RFC 3339 with a zone, in the years 2000–9999 (UTC). */
const instant = z.iso.datetime({ offset: true }).refine((text) => {
  const year = new Date(text).getUTCFullYear();
  return year >= 2000 && year <= 9999;
}, 'must lie in the years 2000–9999 (UTC)');

export const movementsQuery = z
  .strictObject({
    kind: kindList.optional().describe(`Only these kinds (comma-separated): ${MOVEMENT_KINDS.join(', ')}.`),
    since: instant.optional().describe('Only movements at or after this instant.'),
    until: instant.optional().describe('Only movements before this instant.'),
    cursor: z
      .string()
      .max(200)
      .regex(/^[A-Za-z0-9_-]+$/, 'must be a nextCursor value')
      .optional()
      .describe('A `nextCursor` of the page before, asked with the same filters.'),
    limit: wholeNumberParameter(1, 100).default(20),
  })
  .refine(
    (query) =>
      query.since === undefined || query.until === undefined || Date.parse(query.since) < Date.parse(query.until),
    { message: 'until must be after since', path: ['until'] },
  );
