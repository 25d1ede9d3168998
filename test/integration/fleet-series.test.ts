import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { FleetSeries, RETAIN_SECONDS } from '../../src/metrics/fleet-series.js';
import { quantileMs } from '../../src/metrics/series-columns.js';
import {
  ANSWER_TIME_BUCKETS,
  FleetTally,
  MAX_SKUS_PER_SECOND,
  REFUSAL_REASONS,
} from '../../src/metrics/fleet-tally.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

/** A database of the test Redis no other test writes to, so that every key in it is this test's. */
const OWN_DB = 15;
const BLOCK_SECONDS = 10;
/**
 * The most one scope's block may take when every counted field of every one of its seconds is written (10 seconds ×
 * 20 fields, plus a stock sample): about 1.6 KB as Redis 7 stores it (a listpack), about 13 KB were it a hash table
 * (some 64 bytes a field); the bound holds either way (docs/operations.md#the-fleets-series-in-redis).
 */
const MAX_BYTES_PER_BLOCK = 16 * 1024;

describe("the fleet's series in Redis", () => {
  let redis: Redis;
  beforeAll(async () => {
    redis = new Redis(testEndpoints().redisUrl, { db: OWN_DB });
    await redis.flushdb();
  });
  afterAll(async () => {
    await redis?.flushdb();
    redis?.disconnect();
  });

  it('stays within its bound however long the sale: an hour of blocks per scope, at most 20 SKUs a second', async () => {
    const skus = Array.from({ length: MAX_SKUS_PER_SECOND + 2 }, () => uniqueSku('bound'));
    const end = Number((await redis.time())[0]) * 1000;
    // Two simulated hours, ending now by Redis's clock: blocks older than the retention expire as soon as written.
    let now = end - 2 * 3600 * 1000;
    const tally = new FleetTally(() => now);
    const series = new FleetSeries({
      redis,
      now: () => now,
      instance: 'bound-test',
      tally,
      ready: async () => true,
      readStock: async () => ({ available: 5, reserved: 1, sold: 4 }),
      webhookLagSeconds: () => 1.5,
      log: createLogger('warn'),
    });
    // The last five minutes write every field of every second (the worst case a block can take); before, one order
    // per SKU and second, enough to create every block the bound counts.
    const fullFrom = end - 5 * 60 * 1000;
    let written = 0;
    for (; now < end; now += 1000) {
      for (const sku of skus) {
        tally.order({ skus: [sku], outcome: 'placed', seconds: 0.001, waited: false });
        if (now < fullFrom) continue;
        ANSWER_TIME_BUCKETS.forEach((bound) =>
          tally.order({ skus: [sku], outcome: 'placed', seconds: bound, waited: true }),
        );
        tally.order({ skus: [sku], outcome: 'placed', seconds: 10, waited: false });
        for (const reason of REFUSAL_REASONS)
          tally.order({ skus: [sku], outcome: reason, seconds: 0.001, waited: false });
        // Answers the page does not chart add nothing.
        tally.order({ skus: [sku], outcome: 'bad_request', seconds: 0.001, waited: false });
      }
      tally.events(3);
      written += 1;
      if (written % BLOCK_SECONDS === 0) await series.flush();
    }
    await series.flush();

    const blockKeys = (await redis.keys('{fleet}:*')).filter((key) => /:\d+$/.test(key));
    const scopes = new Set(blockKeys.map((key) => key.slice(0, key.lastIndexOf(':'))));
    // The fleet and the first 20 SKUs of each second; the others are counted in the fleet's figures alone.
    expect(scopes.size).toBe(1 + MAX_SKUS_PER_SECOND);
    const blocksPerScope = Math.ceil(RETAIN_SECONDS / BLOCK_SECONDS) + 1;
    expect(blockKeys.length).toBeLessThanOrEqual(scopes.size * blocksPerScope);
    // Not bounded by losing the hour: every scope still holds at least an hour of blocks.
    expect(blockKeys.length).toBeGreaterThanOrEqual(scopes.size * (3600 / BLOCK_SECONDS));
    const blockStart = (key: string) => Number(key.slice(key.lastIndexOf(':') + 1)) * BLOCK_SECONDS * 1000;
    const fullBlocks = blockKeys.filter((key) => blockStart(key) >= fullFrom && blockStart(key) < end);
    const usage = redis.pipeline();
    for (const key of fullBlocks) usage.memory('USAGE', key);
    const bytes = ((await usage.exec()) ?? []).map(([, value]) => Number(value));
    expect(bytes.length).toBe(scopes.size * 30);
    expect(Math.max(...bytes)).toBeLessThanOrEqual(MAX_BYTES_PER_BLOCK);
    // The instances' list holds this instance alone, and its heartbeat expires.
    expect(await redis.zcard('{fleet}:instances')).toBe(1);
    expect(await redis.pttl('{fleet}:instance:bound-test')).toBeGreaterThan(0);

    // The oldest second of the hour is still there; the full seconds whole: every reason, every bucket.
    const lastSecond = Math.floor(end / 1000) - 1;
    const hour = await series.read(skus[0]!, lastSecond - 3599, lastSecond);
    expect(hour.seconds).toBe(3600);
    expect(hour.sku.placed[0]).toBe(1);
    const full = await series.read(skus[0]!, fullFrom / 1000, lastSecond);
    const perSecond = 1 + ANSWER_TIME_BUCKETS.length + 1;
    expect(new Set(full.sku.placed)).toEqual(new Set([perSecond]));
    for (const reason of REFUSAL_REASONS) expect(new Set(full.sku.refusals[reason])).toEqual(new Set([1]));
    expect(new Set(full.fleet.placed)).toEqual(new Set([perSecond * skus.length]));
    expect(new Set(full.fleet.events)).toEqual(new Set([3]));
    // Stock and lag are sampled at each flush (here every 10 simulated seconds), not counted.
    expect(full.sku.available).toContain(5);
    expect(full.fleet.webhookLagSeconds).toContain(1.5);
    // A SKU beyond the 20 of each second has no series of its own.
    const capped = await series.read(skus[skus.length - 1]!, lastSecond - 59, lastSecond);
    expect(capped.sku.placed.every((n) => n === 0)).toBe(true);
  });

  it('merges answer times across instances as summed buckets, interpolated as histogram_quantile does', () => {
    const buckets = new Array<number>(ANSWER_TIME_BUCKETS.length + 1).fill(0);
    expect(quantileMs(buckets, 0.5)).toBeNull();
    // 90 answers within 1 ms (bucket 1: 0.5–1 ms) and 10 within 50 ms (bucket 6: 25–50 ms).
    buckets[1] = 90;
    buckets[6] = 10;
    expect(quantileMs(buckets, 0.5)).toBeCloseTo(0.5 + (0.5 * 50) / 90, 6);
    expect(quantileMs(buckets, 0.99)).toBeCloseTo(25 + (25 * 9) / 10, 6);
    // Beyond the largest bound, the bound.
    buckets[ANSWER_TIME_BUCKETS.length] = 1000;
    expect(quantileMs(buckets, 0.99)).toBe(5000);
  });
});
