import { randomUUID } from 'node:crypto';

/**
 * A new row's id (an order's, a line ticket's): a UUIDv7 (RFC 9562), the time in milliseconds first, so each new row
 * lands at the right edge of the indexes keyed by it rather than on a random page of them, and a long table costs the
 * inserts neither reads of cold pages nor, after every checkpoint, a full-page image each in the WAL. The random bits
 * are a v4's from node's `randomUUID`, which draws them from a pool rather than afresh for every id.
 */
export function timeOrderedUuid(): string {
  const random = randomUUID(); // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx: its version digit is at 14
  const ms = Date.now().toString(16).padStart(12, '0');
  return `${ms.slice(0, 8)}-${ms.slice(8)}-7${random.slice(15)}`;
}
