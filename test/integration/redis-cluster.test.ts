import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisCluster } from '../support/servers/index.js';
import { redisKeys } from '../../src/lock/keys.js';
import { call, ServiceProcess, uniqueSku } from '../support/service.js';

const SEGMENTS = 20;

describe('on a Redis Cluster (3 primaries, 3 replicas)', () => {
  let cluster: RedisCluster;
  let instances: ServiceProcess[] = [];
  beforeAll(async () => {
    cluster = await RedisCluster.start();
    const env = { REDIS_URL: '', REDIS_CLUSTER_NODES: cluster.seeds, LOCK_WAIT_MS: '15000' };
    instances = await Promise.all([1, 2].map(() => ServiceProcess.spawn(env)));
  });
  afterAll(async () => {
    await Promise.all(instances.map((i) => i.stop()));
    await cluster?.destroy();
  });

  it("spreads a 20-segment SKU's locks over at least two primaries, each lock's keys and channels in one slot", async () => {
    const sku = uniqueSku('spread');
    expect((await call(instances[0]!.url, 'POST', '/skus', { sku, stock: 200, segments: SEGMENTS })).status).toBe(201);
    // Enough orders that every segment is locked at least once: each leaves its fencing counter behind.
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => call(instances[i % 2]!.url, 'POST', '/orders', { sku, quantity: 1 })),
    );
    expect(answers.every((a) => a.status === 201)).toBe(true);

    const primaries = await cluster.primaries();
    const holders = new Set<number>();
    let counters = 0;
    for (const primary of primaries) {
      const redis = new Redis(primary.port, '127.0.0.1');
      try {
        const found = await redis.keys(`lock:fence:{stock/${sku}/*`);
        counters += found.length;
        if (found.length > 0) holders.add(primary.port);
      } finally {
        redis.disconnect();
      }
    }
    expect(counters).toBe(SEGMENTS);
    expect(holders.size).toBeGreaterThanOrEqual(2);

    // What the slot arithmetic says, asked of Redis itself: one slot per lock, not one per SKU.
    const redis = new Redis(primaries[0]!.port, '127.0.0.1');
    try {
      const slots = new Set<number>();
      for (let segment = 0; segment < SEGMENTS; segment++) {
        const name = redisKeys.segmentLock({ sku, layoutVersion: 1, segment });
        const names = [...redisKeys.scriptKeys(name), redisKeys.releasedChannel(name), redisKeys.grantedChannel(name)];
        const own = new Set(
          await Promise.all(names.map((n) => redis.call('CLUSTER', 'KEYSLOT', n) as Promise<number>)),
        );
        expect(own.size).toBe(1);
        slots.add([...own][0]!);
      }
      expect(slots.size).toBeGreaterThan(SEGMENTS / 2);
    } finally {
      redis.disconnect();
    }
  });

  it('tells every instance of a restock: one that saw the SKU sold out sells the new stock at once', async () => {
    const sku = uniqueSku('notice');
    const [a, b] = instances as [ServiceProcess, ServiceProcess];
    expect((await call(a.url, 'POST', '/skus', { sku, stock: 4, segments: 4 })).status).toBe(201);
    for (let i = 0; i < 4; i++) expect((await call(b.url, 'POST', '/orders', { sku, quantity: 1 })).status).toBe(201);
    // B now knows every segment empty and refuses without looking (the sold-out fast path).
    expect((await call(b.url, 'POST', '/orders', { sku, quantity: 1 })).status).toBe(409);
    expect((await call(a.url, 'POST', `/skus/${sku}/restock`, { quantity: 4 })).status).toBe(200);
    // Only the SKU-change notice, a shard channel on one of the primaries, can have told B: a bounded wait for it.
    let placed = false;
    for (const deadline = Date.now() + 5_000; !placed && Date.now() < deadline;) {
      placed = (await call(b.url, 'POST', '/orders', { sku, quantity: 1 })).status === 201;
      if (!placed) await new Promise((r) => setTimeout(r, 20));
    }
    expect(placed).toBe(true);
  });
});
