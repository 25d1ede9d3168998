import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer, ZooKeeperServer, zookeeperMissing } from '../support/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import { ZooKeeperLock } from '../../src/lock/backends/zookeeper.js';
import type { DistributedLock } from '../../src/lock/distributed-lock.js';
import { redisKeys } from '../../src/lock/keys.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

const zkMissing = zookeeperMissing();
if (zkMissing && process.env.CI) throw new Error(`cross-backend fencing test cannot run: ${zkMissing}`);
if (zkMissing) console.warn(`cross-backend fencing runs WITHOUT ZooKeeper: ${zkMissing}`);

/**
 * Switching LOCK_BACKEND must not strand the data: Postgres keeps the last token each segment was written with, so
 * whichever backend comes next must issue larger tokens from its own counter, and switching back must too.
 */
describe('fencing tokens across backends', () => {
  let redis: Redis;
  let nodes: RedisServer[];
  let zookeeper: ZooKeeperServer | undefined;
  const locks: [string, DistributedLock][] = [];
  beforeAll(async () => {
    redis = new Redis(testEndpoints().redisUrl);
    nodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
    zookeeper = zkMissing ? undefined : await ZooKeeperServer.start();
    locks.push(['redis', new RedisLock({ redis })]);
    locks.push(['postgres', new PostgresLock({ connectionString: testEndpoints().databaseUrl })]);
    locks.push(['redlock', new RedlockLock({ urls: nodes.map((n) => n.url) })]);
    if (zookeeper) locks.push(['zookeeper', new ZooKeeperLock({ connect: zookeeper.connect })]);
  });
  afterAll(async () => {
    await Promise.all(locks.map(([, lock]) => lock.close()));
    redis?.disconnect();
    await Promise.all((nodes ?? []).map((n) => n.destroy()));
    await zookeeper?.destroy();
  });

  it('strictly increase whichever backend takes the lock next, and back again', async () => {
    const key = redisKeys.segmentLock({ sku: uniqueSku('xfence'), layoutVersion: 1, segment: 0 });
    const issued: { backend: string; fence: number }[] = [];
    for (let round = 0; round < 3; round++) {
      for (const [backend, lock] of locks) {
        // Each backend first takes the lock a few times on its own, racing its counter ahead of the others.
        for (let i = 0; i < 3; i++) {
          const lease = (await lock.tryAcquire(key))!;
          expect(lease, backend).not.toBeNull();
          issued.push({ backend, fence: lease.fence });
          await lock.release(lease);
        }
      }
    }
    for (let i = 1; i < issued.length; i++) {
      expect(issued[i]!.fence, `${issued[i - 1]!.backend} → ${issued[i]!.backend}`).toBeGreaterThan(
        issued[i - 1]!.fence,
      );
    }
  });
});
