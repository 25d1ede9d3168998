import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import type { DistributedLock } from '../../src/lock/distributed-lock.js';
import { LockLostError } from '../../src/lock/errors.js';
import { redisKeys } from '../../src/lock/keys.js';
import { NoticeSubscriber } from '../../src/lock/notice-subscriber.js';
import { defineLockCommands } from '../../src/lock/scripts.js';
import { SegmentLock } from '../../src/lock/segment-lock.js';
import { UnlockWaiters } from '../../src/lock/unlock-waiters.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

/** The order flow's SegmentLock, unchanged in use, on each backend it can delegate to. */
describe('SegmentLock over the lock backends', () => {
  let redis: Redis;
  let subscriber: Redis;
  let listener: Redis;
  let waiters: UnlockWaiters;
  let lockNodes: RedisServer[];
  const backends: DistributedLock[] = [];
  beforeAll(async () => {
    const { redisUrl } = testEndpoints();
    redis = new Redis(redisUrl);
    subscriber = new Redis(redisUrl);
    listener = new Redis(redisUrl);
    defineLockCommands(redis);
    waiters = new UnlockWaiters(new NoticeSubscriber(subscriber));
    lockNodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
  });
  afterAll(async () => {
    await Promise.all(backends.map((b) => b.close()));
    waiters.close();
    for (const c of [redis, subscriber, listener]) c.disconnect();
    await Promise.all(lockNodes.map((n) => n.destroy()));
  });

  const variants: [string, () => DistributedLock | undefined][] = [
    ['redis (default)', () => undefined],
    ['postgres', () => new PostgresLock({ connectionString: testEndpoints().databaseUrl })],
    ['redlock', () => new RedlockLock({ urls: lockNodes.map((n) => n.url) })],
  ];

  for (const [name, make] of variants) {
    it(`${name}: one holder per segment, rising fences, an unlock notice on the order flow's channel`, async () => {
      const backend = make();
      if (backend) backends.push(backend);
      const lock = new SegmentLock(redis, waiters, 5_000, { backend, watchdog: true });
      const other = new SegmentLock(redis, waiters, 5_000, { backend });
      const ref = { sku: uniqueSku(`seg-${name.split(' ')[0]}`), layoutVersion: 1, segment: 2 };
      const channel = redisKeys.unlockChannel(ref.sku);
      await listener.subscribe(channel);
      const notices: string[] = [];
      listener.on('message', (c: string, message: string) => c === channel && notices.push(message));

      const lease = (await lock.tryAcquire(ref))!;
      expect(lease.signal).toBeInstanceOf(AbortSignal);
      expect(await other.tryAcquire(ref)).toBeNull();
      expect(await lock.extend(lease)).toBe(true);
      expect(await lock.release(lease)).toBe(true);
      expect(await lock.release(lease)).toBe(false);
      const next = (await other.tryAcquire(ref))!;
      expect(next.fence).toBeGreaterThan(lease.fence);
      const waited = other.acquire(ref, Date.now() + 3_000);
      await other.release(next);
      const third = (await waited)!;
      expect(third.fence).toBeGreaterThan(next.fence);
      await other.release(third);
      await new Promise((r) => setTimeout(r, 50));
      expect(notices.filter((n) => n.endsWith('|1/2')).length).toBeGreaterThanOrEqual(3);
      await listener.unsubscribe(channel);
      listener.removeAllListeners('message');
    });
  }

  it('fires the lease signal when a watched segment lock is taken away', async () => {
    const lock = new SegmentLock(redis, waiters, 600, { watchdog: true });
    const ref = { sku: uniqueSku('seg-lost'), layoutVersion: 1, segment: 0 };
    const lease = (await lock.tryAcquire(ref))!;
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
    await redis.del(redisKeys.segmentLock(ref));
    expect(await lost).toBeInstanceOf(LockLostError);
    expect(await lock.release(lease)).toBe(false);
  });
});
