import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 1_200;
const SEGMENTS = 16;
/** Sentinel counts the primary down after this long without an answer, then promotes the replica. */
const DOWN_AFTER_MS = 1_000;

/**
 * A primary, its replica and a Sentinel; the services find the primary through Sentinel (REDIS_SENTINELS). The
 * primary is killed (SIGKILL) mid-load: Sentinel promotes the replica, the services' connections ask Sentinel anew
 * and carry on there. Whatever the replica had not received (held locks, fencing counters) is gone with the primary.
 */
describe('fault: Sentinel promotes the replica after the primary dies mid-load', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({
      instances: 3,
      redisSentinel: { downAfterMs: DOWN_AFTER_MS },
      env: { LOCK_TTL_MS: '5000', CRITICAL_SECTION_DELAY_MS: '20' },
    });
  });
  afterAll(() => bench?.teardown());

  it('resumes orders within seconds, loses no acknowledged order and oversells nothing', async () => {
    const group = bench.sentinelGroup;
    const sku = await bench.createSku(STOCK, SEGMENTS);
    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.3)).toBe(true);
    const killedAt = Date.now();
    await group.primary.stop('immediate');

    const failoverMs = await waitFor(async () => (await group.primaryPort()) === group.replica.port, 30_000, 100);
    await bench.inspect(group.replica.url);
    const readyMs = await bench.fleet.readyWithin(10_000);
    const readyAfterKillMs = Date.now() - killedAt;
    const acknowledgedAtFailover = load.acknowledgedUnits();
    expect(await load.untilAcknowledged(Math.min(STOCK, acknowledgedAtFailover + 30), 20_000)).toBe(true);

    const report = await bench.finish('Sentinel failover after the primary died', sku, load, {
      failoverMs,
      readyMs,
      readyAfterKillMs,
      fencedOut: await scrapeCounter(bench.fleet.urls(), 'stock_fenced_out_total'),
    });
    expect(failoverMs).toBeLessThan(30_000);
    expect(readyMs).toBeLessThanOrEqual(10_000);
    expect(report.lost).toBe(0);
    expect(report.oversold).toBe(0);
    expect(report.violations).toEqual([]);
  }, 180_000);
});
