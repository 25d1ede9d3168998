import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisKeys } from '../../src/lock/keys.js';
import { FaultBench } from '../support/fault-bench.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 1_200;
const SEGMENTS = 16;
/** Low enough that the replica is promoted within seconds; see RedisCluster's nodeTimeoutMs. */
const NODE_TIMEOUT_MS = 2_000;

/**
 * A Redis Cluster of 3 primaries and 3 replicas; the primary serving some of the SKU's segment locks is killed
 * (SIGKILL) mid-load. Its replica, promoted by the cluster itself, may lack the locks and fencing counters the
 * primary had not yet replicated; the orders on its slots pause until then, the others go on.
 */
describe('fault: a Redis Cluster primary dies mid-load and its replica takes over', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({
      instances: 3,
      redisCluster: { nodeTimeoutMs: NODE_TIMEOUT_MS },
      // A short business step: holders are inside their critical sections when the primary dies.
      env: { LOCK_TTL_MS: '5000', CRITICAL_SECTION_DELAY_MS: '20' },
    });
  });
  afterAll(() => bench?.teardown());

  it('resumes orders within seconds, loses no acknowledged order and oversells nothing', async () => {
    const sku = await bench.createSku(STOCK, SEGMENTS);
    const probe = new Redis(bench.cluster.nodes[0]!.port, '127.0.0.1');
    const slotOfSegment0 = (await probe.call(
      'CLUSTER',
      'KEYSLOT',
      redisKeys.lock(redisKeys.segmentLock({ sku, layoutVersion: 1, segment: 0 })),
    )) as number;
    probe.disconnect();
    const victim = await bench.cluster.primaryOfSlot(slotOfSegment0);

    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.3)).toBe(true);
    const killedAt = Date.now();
    await victim.stop('immediate');

    // The cluster promotes the victim's replica: every node still running agrees the slots are covered again.
    const failoverMs = await waitFor(
      async () => !(await bench.cluster.primaries()).includes(victim) && (await bench.cluster.settled()),
      NODE_TIMEOUT_MS * 10,
      100,
    );
    const readyMs = await bench.fleet.readyWithin(10_000);
    const readyAfterKillMs = Date.now() - killedAt;
    // Orders go on after the failover, on every segment: the load ends only when the SKU is sold out.
    const acknowledgedAtFailover = load.acknowledgedUnits();
    expect(await load.untilAcknowledged(Math.min(STOCK, acknowledgedAtFailover + 30), 20_000)).toBe(true);

    const report = await bench.finish('Redis Cluster primary killed', sku, load, {
      failoverMs,
      readyMs,
      readyAfterKillMs,
      fencedOut: await scrapeCounter(bench.fleet.urls(), 'stock_fenced_out_total'),
    });
    expect(failoverMs).toBeLessThan(NODE_TIMEOUT_MS * 10);
    expect(readyAfterKillMs).toBeLessThanOrEqual(failoverMs + 10_000);
    expect(readyMs).toBeLessThanOrEqual(10_000);
    expect(report.lost).toBe(0);
    expect(report.oversold).toBe(0);
    expect(report.violations).toEqual([]);
  }, 180_000);
});
