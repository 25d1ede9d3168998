import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import type { DistributedLock } from '../../src/lock/distributed-lock.js';
import { LockLostError } from '../../src/lock/errors.js';
import { redisKeys } from '../../src/lock/keys.js';
import { ReleaseNotices } from '../../src/lock/release-notices.js';
import { segmentLocksProcess } from '../support/segment-locks.js';
import { waitFor } from '../support/wait-for.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

/** The order flow's SegmentLocks, unchanged in use, on each backend it can run on. */
describe('SegmentLocks over the lock backends', () => {
  let listener: Redis;
  let lockNodes: RedisServer[];
  beforeAll(async () => {
    listener = new Redis(testEndpoints().redisUrl);
    lockNodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
  });
  afterAll(async () => {
    listener.disconnect();
    await Promise.all(lockNodes.map((n) => n.destroy()));
  });

  const variants: [string, ((redis: Redis, notices: ReleaseNotices) => DistributedLock) | undefined][] = [
    ['redis', undefined],
    ['postgres', () => new PostgresLock({ connectionString: testEndpoints().databaseUrl })],
    ['redlock', () => new RedlockLock({ urls: lockNodes.map((n) => n.url) })],
  ];

  for (const [name, backend] of variants) {
    it(`${name}: one holder per segment, rising fences, a release notice other processes hear`, async () => {
      const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000, watchdog: true, backend });
      const two = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000, backend });
      try {
        const ref = { sku: uniqueSku(`seg-${name}`), layoutVersion: 1, segment: 2 };
        const channel = redisKeys.releasedChannel(redisKeys.segmentLock(ref));
        await listener.ssubscribe(channel);
        const notices: string[] = [];
        listener.on('smessage', (c: string, message: string) => c === channel && notices.push(message));

        const lease = (await one.locks.tryAcquire(ref))!;
        expect(lease.signal).toBeInstanceOf(AbortSignal);
        expect(await two.locks.tryAcquire(ref)).toBeNull();
        expect(one.locks.isHeldHere(ref)).toBe(true);
        expect(two.locks.isFree(redisKeys.segmentLock(ref))).toBe(false);
        expect(await one.locks.release(lease)).toBe(true);
        expect(one.locks.isHeldHere(ref)).toBe(false);
        // Process two tried while one held it: the release is announced.
        expect(await waitFor(() => notices.length >= 1, 5_000)).toBeLessThan(Infinity);
        const next = (await two.locks.tryAcquire(ref))!;
        expect(next.fence).toBeGreaterThan(lease.fence);
        // Process one waits for it; process two's release wakes it.
        const waited = one.locks.acquire(ref, Date.now() + 3_000);
        if (name === 'redis') {
          // Its attempt marked the lock contended, which makes two's release announce itself.
          const lockKey = redisKeys.lock(redisKeys.segmentLock(ref));
          expect(await waitFor(async () => (await one.redis.hget(lockKey, 'contended')) === '1', 5_000)).toBeLessThan(
            Infinity,
          );
        }
        await two.locks.release(next);
        const third = (await waited)!;
        expect(third.fence).toBeGreaterThan(next.fence);
        expect(await one.locks.release(third)).toBe(true);
        // Two contended releases announced; the last one, which nobody else tried, needs no notice on Redis (the
        // other backends publish every release).
        expect(await waitFor(() => notices.length >= 2, 5_000)).toBeLessThan(Infinity);
        await listener.ping();
        expect(notices.length).toBe(name === 'redis' ? 2 : 3);
        await listener.sunsubscribe(channel);
        listener.removeAllListeners('smessage');
      } finally {
        await one.close();
        await two.close();
      }
    });
  }

  it('fires the lease signal when a watched segment lock is taken away, and the release then answers false', async () => {
    const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 600, watchdog: true });
    try {
      const ref = { sku: uniqueSku('seg-lost'), layoutVersion: 1, segment: 0 };
      const lease = (await one.locks.tryAcquire(ref))!;
      const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
      await one.redis.del(redisKeys.lock(redisKeys.segmentLock(ref)));
      expect(await lost).toBeInstanceOf(LockLostError);
      expect(await one.locks.release(lease)).toBe(false);
      expect(one.locks.isHeldHere(ref)).toBe(false);
    } finally {
      await one.close();
    }
  });

  it('takes a batch of segments at once and releases the rest even when one lease of the batch was released before', async () => {
    const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000 });
    const two = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000 });
    try {
      const sku = uniqueSku('seg-batch');
      const refs = [0, 1, 2, 3].map((segment) => ({ sku, layoutVersion: 1, segment }));
      const taken = (await two.locks.tryAcquire(refs[1]!))!;
      const leases = await one.locks.tryAcquireAll(refs);
      expect(leases.map((lease) => lease !== null)).toEqual([true, false, true, true]);
      const held = leases.filter((lease) => lease !== null);
      expect(await one.locks.release(held[0]!)).toBe(true);
      // The first is released already: the batch as a whole is refused, and the others still go.
      await one.locks.releaseAll(held);
      const again = await two.locks.tryAcquireAll([refs[0]!, refs[2]!, refs[3]!]);
      expect(again.every((lease) => lease !== null)).toBe(true);
      await two.locks.releaseAll([taken, ...(again as NonNullable<(typeof again)[number]>[])]);
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('does not remember "held elsewhere" from an attempt that a release notice overtook', async () => {
    const subscriber = new Redis(testEndpoints().redisUrl);
    const notices = new ReleaseNotices(subscriber);
    try {
      const name = redisKeys.segmentLock({ sku: uniqueSku('seg-stale'), layoutVersion: 1, segment: 0 });
      await notices.listen('sku', [name]);
      // An attempt starts, the holder's release is heard, then the attempt's "held" answer comes back: stale.
      const beforeAttempt = notices.mark();
      notices.notify(name);
      notices.markHeldElsewhere(name, beforeAttempt);
      expect(notices.isHeldElsewhere(name)).toBe(false);
      // An answer from an attempt that started after the last release is believed (for a short while).
      notices.markHeldElsewhere(name, notices.mark());
      expect(notices.isHeldElsewhere(name)).toBe(true);
    } finally {
      notices.close();
      subscriber.disconnect();
    }
  });
});
