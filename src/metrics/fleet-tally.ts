/**
 * This instance's share of the fleet's per-second series (./fleet-series.ts), counted in memory where the metrics'
 * hooks count for Prometheus, and handed over once a second to be added to Redis in one pipeline: the order path
 * never waits for Redis on their account.
 *
 * Each second is numbered by the shared clock (the one sale windows follow), so the instances' counts of one second
 * fall in the same bucket and are summed there.
 */

/** Upper bounds (seconds) of the answer-time buckets; Prometheus's histogram uses the same, so both agree. */
export const ANSWER_TIME_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5];

/** The refusals the page shows by reason; other answers (bad input, unknown SKU, failures) are not a sale's story. */
export const REFUSAL_REASONS = ['out_of_stock', 'not_on_sale', 'purchase_limit', 'lock_busy'] as const;
type RefusalReason = (typeof REFUSAL_REASONS)[number];

/**
 * The one-letter field names a second's counts are stored under (short: a Redis hash of up to 128 small fields is
 * stored compactly). `h<i>`: answers within ANSWER_TIME_BUCKETS[i] (the last, `h13`, beyond the largest bound).
 */
export const FIELD = {
  placed: 'p',
  out_of_stock: 'o',
  not_on_sale: 'n',
  purchase_limit: 'l',
  lock_busy: 'b',
  lockWaits: 'w',
  events: 'e',
  available: 'a',
  reserved: 'r',
  sold: 's',
  webhookLagMs: 'g',
} as const;

/** The fleet-wide series' scope; a SKU's is its name (SKU names are never empty). */
export const FLEET_SCOPE = '';

/** At most this many SKUs get series of their own per instance and second (the busiest first come first served). */
export const MAX_SKUS_PER_SECOND = 20;

/** Counts of one second: scope → field → count. */
export type SecondCounts = Map<string, Map<string, number>>;

/** What an order's answer says of the series: its outcome code and how long it took. */
export interface AnsweredOrder {
  skus: readonly string[];
  outcome: string;
  seconds: number;
  /** Whether it parked waiting for a segment lock. */
  waited: boolean;
}

function bucketOf(seconds: number): number {
  const index = ANSWER_TIME_BUCKETS.findIndex((bound) => seconds <= bound);
  return index === -1 ? ANSWER_TIME_BUCKETS.length : index;
}

const isRefusal = (outcome: string): outcome is RefusalReason =>
  (REFUSAL_REASONS as readonly string[]).includes(outcome);

export class FleetTally {
  private seconds = new Map<number, SecondCounts>();

  constructor(private readonly nowMs: () => number) {}

  /** An order answered now: placed or refused by reason, its answer time and lock wait, fleet-wide and per SKU. */
  order({ skus, outcome, seconds, waited }: AnsweredOrder): void {
    const field = outcome === 'placed' ? FIELD.placed : isRefusal(outcome) ? FIELD[outcome] : undefined;
    if (!field) return;
    const counts = this.second();
    const fields = [field, `h${bucketOf(seconds)}`, ...(waited ? [FIELD.lockWaits] : [])];
    for (const scope of [FLEET_SCOPE, ...new Set(skus)]) {
      if (scope !== FLEET_SCOPE && !counts.has(scope) && counts.size > MAX_SKUS_PER_SECOND) continue;
      for (const name of fields) add(counts, scope, name, 1);
    }
  }

  /** Events this instance sequenced into the feed. */
  events(count: number): void {
    add(this.second(), FLEET_SCOPE, FIELD.events, count);
  }

  /** Every second counted since the last call, oldest first; the tally starts empty again. */
  take(): [second: number, counts: SecondCounts][] {
    const taken = [...this.seconds].sort(([a], [b]) => a - b);
    this.seconds = new Map();
    return taken;
  }

  /** The SKUs with series of their own in `taken`. */
  static skusOf(taken: readonly [number, SecondCounts][]): Set<string> {
    const skus = new Set<string>();
    for (const [, counts] of taken) for (const scope of counts.keys()) if (scope !== FLEET_SCOPE) skus.add(scope);
    return skus;
  }

  private second(): SecondCounts {
    const second = Math.floor(this.nowMs() / 1000);
    let counts = this.seconds.get(second);
    if (!counts) this.seconds.set(second, (counts = new Map()));
    return counts;
  }
}

function add(counts: SecondCounts, scope: string, field: string, n: number): void {
  let fields = counts.get(scope);
  if (!fields) counts.set(scope, (fields = new Map()));
  fields.set(field, (fields.get(field) ?? 0) + n);
}
