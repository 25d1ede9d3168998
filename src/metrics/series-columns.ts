import { ANSWER_TIME_BUCKETS, FIELD, REFUSAL_REASONS } from './fleet-tally.js';

/**
 * Reading the fleet's series back (./fleet-series.ts): a scope's block hashes, whose fields are `<second in block><
 * field>`, turned into one column per figure over consecutive seconds, with p50 and p99 from the summed buckets.
 */

/** Seconds per block: one hash per scope holds this many seconds. */
export const BLOCK_SECONDS = 10;

/** One scope's series over consecutive seconds; null where nothing was recorded (stock is sampled, not counted). */
export interface SeriesColumns {
  placed: number[];
  refusals: Record<(typeof REFUSAL_REASONS)[number], number[]>;
  p50Ms: (number | null)[];
  p99Ms: (number | null)[];
  lockWaits: number[];
  events: number[];
  webhookLagSeconds: (number | null)[];
  available: (number | null)[];
  reserved: (number | null)[];
  sold: (number | null)[];
}

export function columnsOf(
  hashes: Record<string, string>[],
  blocks: number[],
  from: number,
  seconds: number,
): SeriesColumns {
  const zeros = () => new Array<number>(seconds).fill(0);
  const nulls = () => new Array<number | null>(seconds).fill(null);
  const columns: SeriesColumns = {
    placed: zeros(),
    refusals: { out_of_stock: zeros(), not_on_sale: zeros(), purchase_limit: zeros(), lock_busy: zeros() },
    p50Ms: nulls(),
    p99Ms: nulls(),
    lockWaits: zeros(),
    events: zeros(),
    webhookLagSeconds: nulls(),
    available: nulls(),
    reserved: nulls(),
    sold: nulls(),
  };
  const histograms = new Map<number, number[]>();
  const byField: Record<string, (number | null)[]> = {
    [FIELD.placed]: columns.placed,
    [FIELD.lockWaits]: columns.lockWaits,
    [FIELD.events]: columns.events,
    [FIELD.available]: columns.available,
    [FIELD.reserved]: columns.reserved,
    [FIELD.sold]: columns.sold,
  };
  for (const reason of REFUSAL_REASONS) byField[FIELD[reason]] = columns.refusals[reason];
  hashes.forEach((hash, b) => {
    for (const [name, value] of Object.entries(hash)) {
      const i = blocks[b]! * BLOCK_SECONDS + Number(name[0]) - from;
      if (i < 0 || i >= seconds) continue;
      const field = name.slice(1);
      if (field === FIELD.webhookLagMs) columns.webhookLagSeconds[i] = Number(value) / 1000;
      else if (field.startsWith('h')) {
        let buckets = histograms.get(i);
        if (!buckets) histograms.set(i, (buckets = new Array<number>(ANSWER_TIME_BUCKETS.length + 1).fill(0)));
        buckets[Number(field.slice(1))] = Number(value);
      } else {
        const column = byField[field];
        if (column) column[i] = Number(value);
      }
    }
  });
  for (const [i, buckets] of histograms) {
    columns.p50Ms[i] = quantileMs(buckets, 0.5);
    columns.p99Ms[i] = quantileMs(buckets, 0.99);
  }
  return columns;
}

/**
 * The q-quantile of answers counted in ANSWER_TIME_BUCKETS, in milliseconds, interpolated linearly within its bucket
 * as Prometheus's histogram_quantile does; beyond the largest bound it is that bound.
 */
export function quantileMs(buckets: readonly number[], q: number): number | null {
  const total = buckets.reduce((sum, n) => sum + n, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < buckets.length; i++) {
    const count = buckets[i]!;
    if (below + count >= rank && count > 0) {
      if (i === ANSWER_TIME_BUCKETS.length) return ANSWER_TIME_BUCKETS[i - 1]! * 1000;
      const lower = i === 0 ? 0 : ANSWER_TIME_BUCKETS[i - 1]!;
      const upper = ANSWER_TIME_BUCKETS[i]!;
      return (lower + ((upper - lower) * (rank - below)) / count) * 1000;
    }
    below += count;
  }
  return ANSWER_TIME_BUCKETS[ANSWER_TIME_BUCKETS.length - 1]! * 1000;
}
