import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import type { DistributedLock } from '../../src/lock/distributed-lock.js';
import { LockLostError } from '../../src/lock/errors.js';
import { Holdings } from '../../src/lock/holdings.js';
import { redisKeys } from '../../src/lock/keys.js';
import type { ReleaseNotices } from '../../src/lock/release-notices.js';
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

  const variants: [string, ((notices: ReleaseNotices) => DistributedLock) | undefined][] = [
    ['redis', undefined],
    ['postgres', (notices) => new PostgresLock({ connectionString: testEndpoints().databaseUrl, notices })],
    ['redlock', (notices) => new RedlockLock({ urls: lockNodes.map((n) => n.url), notices })],
  ];

  for (const [name, backend] of variants) {
    it(`${name}: one holder per segment, rising fences, a waiter in another process woken by the release`, async () => {
      const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000, watchdog: true, backend });
      const two = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000, backend });
      try {
        const ref = { sku: uniqueSku(`seg-${name}`), layoutVersion: 1, segment: 2 };
        const key = redisKeys.segmentLock(ref);
        const lease = (await one.tryAcquire(ref))!;
        expect(lease.signal).toBeInstanceOf(AbortSignal);
        expect(one.locks.isFree(key)).toBe(false);
        expect(await two.tryAcquire(ref)).toBeNull();
        expect(two.locks.isFree(key)).toBe(false);
        expect(await one.release(lease)).toBe(true);
        expect(one.locks.isFree(key)).toBe(true);
        const next = (await two.acquire(ref))!;
        expect(next.fence).toBeGreaterThan(lease.fence);
        // Process one waits for it; process two's release wakes it, long before its budget.
        const started = Date.now();
        const waited = one.locks.acquire(ref, Date.now() + 20_000);
        await waitFor(() => !one.locks.isFree(key), 5_000);
        await two.release(next);
        const third = (await waited)!;
        expect(Date.now() - started).toBeLessThan(5_000);
        expect(third.fence).toBeGreaterThan(next.fence);
        expect(await one.release(third)).toBe(true);
      } finally {
        await one.close();
        await two.close();
      }
    });
  }

  it('redis: announces a release only when another process tried to take the lock', async () => {
    const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000 });
    const two = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 5_000 });
    try {
      const ref = { sku: uniqueSku('seg-notice'), layoutVersion: 1, segment: 0 };
      const channel = redisKeys.releasedChannel(redisKeys.segmentLock(ref));
      await listener.ssubscribe(channel);
      const notices: string[] = [];
      listener.on('smessage', (c: string, message: string) => c === channel && notices.push(message));
      await one.release((await one.tryAcquire(ref))!);
      const contended = (await one.tryAcquire(ref))!;
      expect(await two.tryAcquire(ref)).toBeNull();
      await one.release(contended);
      // A round trip on the listener's own connection: every message published before it has been delivered.
      expect(await waitFor(() => notices.length >= 1, 5_000)).toBeLessThan(Infinity);
      await listener.ping();
      expect(notices.length).toBe(1);
      await listener.sunsubscribe(channel);
      listener.removeAllListeners('smessage');
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('fires the lease signal when a watched segment lock is taken away, and the release then answers false', async () => {
    const one = segmentLocksProcess(testEndpoints().redisUrl, { ttlMs: 600, watchdog: true });
    try {
      const ref = { sku: uniqueSku('seg-lost'), layoutVersion: 1, segment: 0 };
      const lease = (await one.tryAcquire(ref))!;
      const lost = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
      await one.redis.del(redisKeys.lock(redisKeys.segmentLock(ref)));
      expect(await lost).toBeInstanceOf(LockLostError);
      expect(await one.release(lease)).toBe(false);
      expect(one.locks.isFree(redisKeys.segmentLock(ref))).toBe(true);
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
      const taken = (await two.tryAcquire(refs[1]!))!;
      const leases = await one.locks.tryAcquireAllHolding(refs, new Map());
      expect(leases.map((lease) => lease !== null)).toEqual([true, false, true, true]);
      const held = leases.filter((lease) => lease !== null);
      expect(await one.release(held[0]!)).toBe(true);
      // The first is released already: the batch as a whole is refused, and the others still go.
      await one.locks.releaseAll(held);
      const again = await two.locks.tryAcquireAllHolding([refs[0]!, refs[2]!, refs[3]!], new Map());
      expect(again.every((lease) => lease !== null)).toBe(true);
      await two.locks.releaseAll([taken, ...(again as NonNullable<(typeof again)[number]>[])]);
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it('does not remember "busy elsewhere" from an attempt that a release overtook', () => {
    const holdings = new Holdings();
    const key = redisKeys.segmentLock({ sku: uniqueSku('seg-stale'), layoutVersion: 1, segment: 0 });
    // An attempt starts, the holder's release is heard, then the attempt's "busy" answer comes back: stale.
    const beforeAttempt = holdings.heard();
    expect(holdings.startTaking(key)).toBe(true);
    holdings.released(key);
    holdings.notTaken(key, beforeAttempt);
    expect(holdings.isFree(key)).toBe(true);
    // An answer from an attempt that started after the last release is believed (for a short while).
    const later = holdings.heard();
    holdings.startTaking(key);
    holdings.notTaken(key, later);
    expect(holdings.isFree(key)).toBe(false);
  });
});
