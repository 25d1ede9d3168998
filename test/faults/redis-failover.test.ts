import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { redisKeys } from '../../src/lock/keys.js';
import { FaultBench } from '../support/fault-bench.js';
import { lockOwners } from '../support/fault-books.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { TcpForwarder } from '../support/tcp-forwarder.js';
import { waitFor } from '../support/wait-for.js';

// Enough for the load to outlast the partition by seconds, however late the test sees its first orders acknowledged.
const STOCK = 3_000;
const SEGMENTS = 16;
const LOCK_TTL_MS = 5_000;
const PARTITION_MS = 1_000;

/**
 * The services reach Redis through a forwarder standing in for a virtual IP; the replica reaches the primary through
 * another, which can partition silently. Asynchronous replication lags by whatever the partition held back: the
 * locks taken and the fencing tokens drawn meanwhile exist only on the primary, and die with it.
 */
describe('fault: Redis primary fails over to a lagging replica while locks are held', () => {
  let bench: FaultBench;
  let replica: RedisServer;
  let replicationLink: TcpForwarder;
  let virtualIp: TcpForwarder;
  beforeAll(async () => {
    bench = await FaultBench.start({
      instances: 3,
      // A 100 ms business step: holders are still inside their critical sections when the failover lands.
      env: { LOCK_TTL_MS: String(LOCK_TTL_MS), CRITICAL_SECTION_DELAY_MS: '100' },
      servicesRedisUrl: async (primary) => {
        replicationLink = await TcpForwarder.start(primary.port);
        replica = await RedisServer.start({ extraArgs: ['--replicaof', '127.0.0.1', String(replicationLink.port)] });
        virtualIp = await TcpForwarder.start(primary.port);
        return virtualIp.url;
      },
    });
    const replicaClient = new Redis(replica.url);
    const synced = await waitFor(
      async () => /master_link_status:up/.test(await replicaClient.info('replication')),
      10_000,
    );
    replicaClient.disconnect();
    if (synced === Infinity) throw new Error('the replica did not sync');
  });
  afterAll(async () => {
    await bench?.teardown();
    await virtualIp?.close();
    await replicationLink?.close();
    await replica?.destroy();
  });

  it('hands held locks to new owners, and the fencing guard still keeps the stock exact', async () => {
    const sku = await bench.createSku(STOCK, SEGMENTS);
    const fenceKeys = Array.from({ length: SEGMENTS }, (_, segment) =>
      redisKeys.fence(redisKeys.segmentLock({ sku, layoutVersion: 1, segment })),
    );
    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.1)).toBe(true);

    replicationLink.freeze();
    await sleep(PARTITION_MS);
    // The primary dies once it holds a lock the replica has not heard of (taken during the partition), seen in the
    // stores rather than trusted to the partition's length: the locks of one instant may all be between two holds.
    const laggingReplica = new Redis(replica.url);
    let primaryLocks = new Map<string, string>();
    const heldOnlyOnPrimary = await waitFor(async () => {
      primaryLocks = await lockOwners(bench.inspector);
      const known = await lockOwners(laggingReplica);
      return [...primaryLocks].some(([key, owner]) => known.get(key) !== owner);
    }, 10_000);
    laggingReplica.disconnect();
    expect(heldOnlyOnPrimary, 'no lock taken during the partition was held').not.toBe(Infinity);
    const primaryCounters = (await bench.inspector.mget(...fenceKeys)).map(Number);

    await bench.redis.stop(); // the primary dies
    replicationLink.cutAll(); // what the partition held back is lost with it
    const promoted = new Redis(replica.url);
    await promoted.replicaof('NO', 'ONE');
    virtualIp.switchTo(replica.port); // the virtual IP moves; the services reconnect to the same address
    const failedOverAt = Date.now();
    await bench.inspect(replica.url);
    const replicaLocks = await lockOwners(promoted);
    const replicaCounters = (await promoted.mget(...fenceKeys)).map(Number);
    const lostLocks = [...primaryLocks].filter(([key, owner]) => replicaLocks.get(key) !== owner);

    // A lost lock is free on the new primary while its holder still believes it holds it: watch others take it.
    const takenWhileHeld = new Set<string>();
    await waitFor(async () => {
      const now = await lockOwners(promoted);
      for (const [key, owner] of lostLocks) if (now.has(key) && now.get(key) !== owner) takenWhileHeld.add(key);
      return takenWhileHeld.size === lostLocks.length || Date.now() - failedOverAt > LOCK_TTL_MS / 2;
    }, LOCK_TTL_MS);
    const readyMs = await bench.fleet.readyWithin(10_000);

    const countersBehind = primaryCounters.filter((p, i) => p > (replicaCounters[i] ?? 0)).length;
    const report = await bench.finish('Redis failover to a lagging replica', sku, load, {
      readyMs,
      locksHeldAtFailover: primaryLocks.size,
      locksLostInFailover: lostLocks.length,
      takenByAnotherWhileHeld: takenWhileHeld.size,
      fencingCountersBehind: countersBehind,
      fencedOut: await scrapeCounter(bench.fleet.urls(), 'stock_fenced_out_total'),
    });
    promoted.disconnect();

    // The article's warning, observed: the replica had not heard of some held locks, and counters went back.
    expect(lostLocks.length).toBeGreaterThan(0);
    expect(countersBehind).toBeGreaterThan(0);
    expect(readyMs).toBeLessThanOrEqual(10_000);
    expect(report.violations).toEqual([]);
  }, 180_000);
});
