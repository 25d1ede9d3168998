/** Pure arithmetic of segments: how stock is spread and how an order is split. No I/O here. */

/** Splits `total` into `parts` shares as evenly as possible; the first `total % parts` shares get one more. */
export function splitEvenly(total: number, parts: number): number[] {
  if (!Number.isSafeInteger(total) || total < 0) throw new RangeError(`total must be a safe integer ≥ 0, got ${total}`);
  if (!Number.isInteger(parts) || parts < 1) throw new RangeError(`parts must be an integer ≥ 1, got ${parts}`);
  const base = Math.floor(total / parts);
  const extra = total % parts;
  return Array.from({ length: parts }, (_, i) => base + (i < extra ? 1 : 0));
}

/** A segment's stock; `S` names segments (their number, or the key a batch knows them by). */
export interface SegmentStock<S = number> {
  segment: S;
  available: number;
}

export interface SegmentTake<S = number> {
  segment: S;
  quantity: number;
}

/** Takes `quantity` from the segments in the given order, each giving what it has; null if they fall short. */
export function splitAcross<S>(stock: readonly SegmentStock<S>[], quantity: number): SegmentTake<S>[] | null {
  const takes: SegmentTake<S>[] = [];
  let remaining = quantity;
  for (const { segment, available } of stock) {
    if (remaining === 0) break;
    const take = Math.min(available, remaining);
    if (take > 0) takes.push({ segment, quantity: take });
    remaining -= take;
  }
  return remaining === 0 ? takes : null;
}
