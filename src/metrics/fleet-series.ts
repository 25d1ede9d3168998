import type { SkuTotals } from '../events/event-types.js';
import type { Logger } from '../logger.js';
import type { RedisClient } from '../redis/connections.js';
import { redisKeys } from '../lock/keys.js';
import {
  ANSWER_TIME_BUCKETS,
  FIELD,
  FLEET_SCOPE,
  FleetTally,
  REFUSAL_REASONS,
  type SecondCounts,
} from './fleet-tally.js';

/**
 * The fleet's per-second series in Redis, which every instance adds to and any instance reads: the dashboard's one
 * picture of a sale, whichever instance serves it (docs/design.md#the-fleets-series).
 *
 * Layout: one hash per scope (the fleet, or one SKU) and block of BLOCK_SECONDS seconds, field `<second in block><
 * field>` (FIELD), each instance adding its counts with HINCRBY once a second. A block expires RETAIN_SECONDS after
 * its last second, so memory is bounded by the seconds kept, not by the sale's length (docs/operations.md). All keys
 * carry the `{fleet}` hash tag: one slot, so a flush or a read is one pipeline on a cluster too.
 */
const BLOCK_SECONDS = 10;
/** The page shows the last hour; a block lives a minute longer so the oldest second shown is still there. */
export const RETAIN_SECONDS = 3600 + 60;
/** A heartbeat outlives two missed flushes; an instance silent for longer is listed as gone, for a minute. */
const HEARTBEAT_MS = 3_000;
const GONE_LISTED_MS = 60_000;
/** Stock reads per instance and second, for the SKUs it took orders for (one SKU view statement each). */
const STOCK_READS_PER_SECOND = 5;

const blockKey = (scope: string, block: number) =>
  redisKeys.fleetBlock(scope === FLEET_SCOPE ? 'all' : { sku: scope }, block);

export interface FleetSeriesOptions {
  redis: RedisClient;
  /** The shared clock: seconds are numbered by it, the same on every instance. */
  now: () => number;
  instance: string;
  tally: FleetTally;
  ready: () => Promise<boolean>;
  readStock: (sku: string) => Promise<SkuTotals>;
  /** The longest webhook delivery lag this instance sees now. */
  webhookLagSeconds: () => number;
  log: Logger;
}

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

export interface SeriesWindow {
  /** The first second (epoch seconds, shared clock) and how many follow it. */
  from: number;
  seconds: number;
  fleet: SeriesColumns;
  sku: SeriesColumns;
}

export interface InstanceBeat {
  instance: string;
  ready: boolean;
  /** Shared-clock milliseconds of its last heartbeat. */
  seenAt: number;
  /** False once its heartbeat expired: stopped, or cut off from Redis. */
  alive: boolean;
}

export class FleetSeries {
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  /** Stock the dashboard read this second, so the flush need not read it again. */
  private stockRead = new Map<string, SkuTotals>();

  constructor(private readonly options: FleetSeriesOptions) {}

  /** This instance's name, as the instances' list shows it. */
  get instance(): string {
    return this.options.instance;
  }

  /** The shared clock's time, which numbers the seconds. */
  now(): number {
    return this.options.now();
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), 1000);
  }

  /** Stops the timer and writes what is left, with a heartbeat that expires at once. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flushing;
    await this.flush(true).catch(() => {});
  }

  /** The SKU's books as the dashboard just read them: recorded with the next flush. */
  recordStock(sku: string, totals: SkuTotals): void {
    this.stockRead.set(sku, totals);
  }

  /**
   * Adds this instance's counts since the last flush, samples stock, beats: one pipeline. A flush asked for while one
   * runs is that one. The `last` flush, at stop, removes the heartbeat, so the page lists the instance as gone at once.
   */
  flush(last = false): Promise<void> {
    if (this.flushing) return this.flushing;
    this.flushing = this.write(last).finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  private async write(last: boolean): Promise<void> {
    const { redis, tally, now, instance } = this.options;
    const taken = tally.take();
    const stock = await this.sampleStock(FleetTally.skusOf(taken));
    const nowMs = now();
    const second = Math.floor(nowMs / 1000);
    const ready = !last && (await this.options.ready().catch(() => false));
    const pipeline = redis.pipeline();
    /** Each block written, by key: its expiry is set once per flush. */
    const expiring = new Map<string, number>();
    const keyOf = (scope: string, at: number) => {
      const block = Math.floor(at / BLOCK_SECONDS);
      const key = blockKey(scope, block);
      expiring.set(key, block);
      return { key, slot: at - block * BLOCK_SECONDS };
    };
    for (const [at, counts] of taken) addCounts(counts, at, keyOf, pipeline);
    for (const [sku, totals] of stock) {
      const { key, slot } = keyOf(sku, second);
      pipeline.hset(key, {
        [`${slot}${FIELD.available}`]: totals.available,
        [`${slot}${FIELD.reserved}`]: totals.reserved,
        [`${slot}${FIELD.sold}`]: totals.sold,
      });
    }
    const lag = this.options.webhookLagSeconds();
    if (lag > 0) {
      // Deliveries run on every instance, so "the fleet's lag" is the last flush's in that second: close enough to
      // see a backlog build, and Prometheus keeps each instance's own (stock_webhook_delivery_lag_seconds).
      const { key, slot } = keyOf(FLEET_SCOPE, second);
      pipeline.hset(key, `${slot}${FIELD.webhookLagMs}`, Math.round(lag * 1000));
    }
    for (const [key, block] of expiring) pipeline.expireat(key, (block + 1) * BLOCK_SECONDS + RETAIN_SECONDS);
    const beat: InstanceBeat = { instance, ready, seenAt: nowMs, alive: true };
    if (last) pipeline.del(redisKeys.fleetInstance(instance));
    else pipeline.set(redisKeys.fleetInstance(instance), JSON.stringify(beat), 'PX', HEARTBEAT_MS);
    pipeline.zadd(redisKeys.fleetInstances, nowMs, instance);
    pipeline.zremrangebyscore(redisKeys.fleetInstances, '-inf', nowMs - GONE_LISTED_MS);
    pipeline.pexpire(redisKeys.fleetInstances, GONE_LISTED_MS);
    const results = await pipeline.exec();
    const failed = results?.find(([error]) => error);
    // Counts of a failed flush are dropped, not retried: the series is a picture, the books are in Postgres.
    if (failed) this.options.log.warn({ err: failed[0]!.message }, 'fleet series flush failed');
  }

  /** The stock of the SKUs just ordered, and of those the dashboard read; a SKU whose read fails is left out. */
  private async sampleStock(ordered: Set<string>): Promise<Map<string, SkuTotals>> {
    const stock = this.stockRead;
    this.stockRead = new Map();
    const toRead = [...ordered].filter((sku) => !stock.has(sku)).slice(0, STOCK_READS_PER_SECOND);
    const read = await Promise.all(toRead.map((sku) => this.options.readStock(sku).catch(() => undefined)));
    toRead.forEach((sku, i) => read[i] && stock.set(sku, read[i]));
    return stock;
  }

  /** The fleet's and the SKU's series from `from` to `to` (epoch seconds, inclusive): one pipeline. */
  async read(sku: string, from: number, to: number): Promise<SeriesWindow> {
    const blocks: number[] = [];
    for (let b = Math.floor(from / BLOCK_SECONDS); b <= Math.floor(to / BLOCK_SECONDS); b++) blocks.push(b);
    const pipeline = this.options.redis.pipeline();
    for (const scope of [FLEET_SCOPE, sku]) for (const block of blocks) pipeline.hgetall(blockKey(scope, block));
    const results = (await pipeline.exec()) ?? [];
    const hashes = results.map(([error, value]) => {
      if (error) throw error;
      return value as Record<string, string>;
    });
    const seconds = to - from + 1;
    return {
      from,
      seconds,
      fleet: columnsOf(hashes.slice(0, blocks.length), blocks, from, seconds),
      sku: columnsOf(hashes.slice(blocks.length), blocks, from, seconds),
    };
  }

  /** The instances that beat within the last minute, by name. */
  async instances(): Promise<InstanceBeat[]> {
    const { redis, now } = this.options;
    const names = await redis.zrangebyscore(redisKeys.fleetInstances, now() - GONE_LISTED_MS, '+inf', 'WITHSCORES');
    const listed: { instance: string; seenAt: number }[] = [];
    for (let i = 0; i < names.length; i += 2) listed.push({ instance: names[i]!, seenAt: Number(names[i + 1]) });
    if (listed.length === 0) return [];
    const beats = await redis.mget(listed.map(({ instance }) => redisKeys.fleetInstance(instance)));
    return listed
      .map(({ instance, seenAt }, i) => {
        const beat = beats[i] ? (JSON.parse(beats[i]) as InstanceBeat) : undefined;
        return beat ?? { instance, ready: false, seenAt, alive: false };
      })
      .sort((a, b) => a.instance.localeCompare(b.instance));
  }
}

type KeyOf = (scope: string, at: number) => { key: string; slot: number };

function addCounts(
  counts: SecondCounts,
  at: number,
  keyOf: KeyOf,
  pipeline: ReturnType<RedisClient['pipeline']>,
): void {
  for (const [scope, fields] of counts) {
    const { key, slot } = keyOf(scope, at);
    for (const [field, n] of fields) pipeline.hincrby(key, `${slot}${field}`, n);
  }
}

function columnsOf(hashes: Record<string, string>[], blocks: number[], from: number, seconds: number): SeriesColumns {
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
