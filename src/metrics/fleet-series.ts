import type { SkuTotals } from '../events/event-types.js';
import type { Logger } from '../logger.js';
import type { RedisClient } from '../redis/connections.js';
import { PeriodicJob } from '../events/periodic-job.js';
import { redisKeys } from '../lock/keys.js';
import { FIELD, FLEET_SCOPE, FleetTally } from './fleet-tally.js';
import { BLOCK_SECONDS, columnsOf, type SeriesColumns } from './series-columns.js';

/**
 * The fleet's per-second series in Redis, which every instance adds to and any instance reads: the dashboard's one
 * picture of a sale, whichever instance serves it (docs/design.md#the-fleets-series).
 *
 * Layout: one hash per scope (the fleet, or one SKU) and block of BLOCK_SECONDS seconds, field `<second in block><
 * field>` (FIELD), each instance adding its counts with HINCRBY once a second. A block expires RETAIN_SECONDS after
 * its last second, so memory is bounded by the seconds kept, not by the sale's length (docs/operations.md). All keys
 * carry the `{fleet}` hash tag: one slot, so a flush or a read is one pipeline on a cluster too.
 */
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
  /**
   * Counts are written by a job of their own, which waits for nothing but Redis: were they written with the samples,
   * a slow stock read or readiness check would hold them back past the seconds a snapshot sends again, and a page
   * already open would never see them.
   */
  private readonly counting: PeriodicJob;
  private readonly sampling: PeriodicJob;
  /** Stock the dashboard read this second, so the sample need not read it again. */
  private stockRead = new Map<string, SkuTotals>();
  /** The SKUs ordered since the last sample: their stock is sampled next. */
  private ordered = new Set<string>();

  constructor(private readonly options: FleetSeriesOptions) {
    const failed = (error: Error) => options.log.warn({ err: error.message }, 'fleet series flush failed');
    this.counting = new PeriodicJob(1000, () => this.writeCounts(), failed);
    this.sampling = new PeriodicJob(1000, () => this.writeSamples(false), failed);
  }

  /** This instance's name, as the instances' list shows it. */
  get instance(): string {
    return this.options.instance;
  }

  /** The shared clock's time, which numbers the seconds. */
  now(): number {
    return this.options.now();
  }

  start(): void {
    this.counting.start();
    this.sampling.start();
  }

  /** Stops the jobs and writes what is left, removing the heartbeat, so the page lists the instance as gone at once. */
  async stop(): Promise<void> {
    await Promise.all([this.counting.stop(), this.sampling.stop()]);
    await Promise.all([this.writeCounts(), this.writeSamples(true)]).catch(() => {});
  }

  /** The SKU's books as the dashboard just read them: recorded with the next sample. */
  recordStock(sku: string, totals: SkuTotals): void {
    this.stockRead.set(sku, totals);
  }

  /** Writes this instance's counts and a sample now, as the jobs do once a second. */
  async flush(): Promise<void> {
    await this.writeCounts();
    await this.writeSamples(false);
  }

  /** Adds this instance's counts since the last write to their seconds: one pipeline. */
  private async writeCounts(): Promise<void> {
    const taken = this.options.tally.take();
    if (taken.length === 0) return;
    for (const sku of FleetTally.skusOf(taken)) this.ordered.add(sku);
    const pipeline = this.options.redis.pipeline();
    const blocks = new Blocks();
    for (const [at, counts] of taken)
      for (const [scope, fields] of counts) {
        const { key, slot } = blocks.keyOf(scope, at);
        for (const [field, n] of fields) pipeline.hincrby(key, `${slot}${field}`, n);
      }
    blocks.expire(pipeline);
    await execAll(pipeline);
  }

  /** Samples stock and webhook lag into this second, and beats: one pipeline. The `last`, at stop, removes the beat. */
  private async writeSamples(last: boolean): Promise<void> {
    const { redis, now, instance } = this.options;
    const stock = await this.sampleStock();
    const ready = !last && (await this.options.ready().catch(() => false));
    const nowMs = now();
    const second = Math.floor(nowMs / 1000);
    const pipeline = redis.pipeline();
    const blocks = new Blocks();
    for (const [sku, totals] of stock) {
      const { key, slot } = blocks.keyOf(sku, second);
      pipeline.hset(key, {
        [`${slot}${FIELD.available}`]: totals.available,
        [`${slot}${FIELD.reserved}`]: totals.reserved,
        [`${slot}${FIELD.sold}`]: totals.sold,
      });
    }
    const lag = this.options.webhookLagSeconds();
    if (lag > 0) {
      // Deliveries run on every instance, so "the fleet's lag" is the last sample's in that second: close enough to
      // see a backlog build, and Prometheus keeps each instance's own (stock_webhook_delivery_lag_seconds).
      const { key, slot } = blocks.keyOf(FLEET_SCOPE, second);
      pipeline.hset(key, `${slot}${FIELD.webhookLagMs}`, Math.round(lag * 1000));
    }
    blocks.expire(pipeline);
    const beat: InstanceBeat = { instance, ready, seenAt: nowMs, alive: true };
    if (last) pipeline.del(redisKeys.fleetInstance(instance));
    else pipeline.set(redisKeys.fleetInstance(instance), JSON.stringify(beat), 'PX', HEARTBEAT_MS);
    pipeline.zadd(redisKeys.fleetInstances, nowMs, instance);
    pipeline.zremrangebyscore(redisKeys.fleetInstances, '-inf', nowMs - GONE_LISTED_MS);
    pipeline.pexpire(redisKeys.fleetInstances, GONE_LISTED_MS);
    await execAll(pipeline);
  }

  /** The stock of the SKUs just ordered, and of those the dashboard read; a SKU whose read fails is left out. */
  private async sampleStock(): Promise<Map<string, SkuTotals>> {
    const [stock, ordered] = [this.stockRead, this.ordered];
    [this.stockRead, this.ordered] = [new Map(), new Set()];
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

type Pipeline = ReturnType<RedisClient['pipeline']>;

/** The blocks one pipeline writes: each key's expiry is set once, after its writes. */
class Blocks {
  private readonly written = new Map<string, number>();

  keyOf(scope: string, at: number): { key: string; slot: number } {
    const block = Math.floor(at / BLOCK_SECONDS);
    const key = blockKey(scope, block);
    this.written.set(key, block);
    return { key, slot: at - block * BLOCK_SECONDS };
  }

  expire(pipeline: Pipeline): void {
    for (const [key, block] of this.written) pipeline.expireat(key, (block + 1) * BLOCK_SECONDS + RETAIN_SECONDS);
  }
}

/** Runs the pipeline; a command's error fails it. Its writes are dropped, not retried: the series are a picture. */
async function execAll(pipeline: Pipeline): Promise<void> {
  const failed = (await pipeline.exec())?.find(([error]) => error);
  if (failed) throw failed[0]!;
}
