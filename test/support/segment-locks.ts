import { Redis } from 'ioredis';
import { type SegmentRef, SegmentLocks } from '../../src/inventory/segment-locks.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import type { DistributedLock, LockLease } from '../../src/lock/distributed-lock.js';
import { ReleaseNotices } from '../../src/lock/release-notices.js';

/**
 * The segment locks as one service process has them: its own Redis connections, release notices and lock client
 * (the `redis` backend unless another is given). Two of these are two processes.
 */
export function segmentLocksProcess(
  redisUrl: string,
  options: { ttlMs: number; watchdog?: boolean; backend?: (notices: ReleaseNotices) => DistributedLock },
) {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const subscriber = new Redis(redisUrl);
  for (const connection of [redis, subscriber]) connection.on('error', () => {});
  const notices = new ReleaseNotices(subscriber, redis);
  const backend =
    options.backend?.(notices) ?? new RedisLock({ redis, notices, ttlMs: options.ttlMs, watchdog: false });
  const locks = new SegmentLocks(backend, { ttlMs: options.ttlMs, watchdog: options.watchdog ?? false });
  return {
    locks,
    redis,
    /** One attempt at a segment's lock: null when busy. */
    tryAcquire: async (ref: SegmentRef) => (await locks.tryAcquireAllHolding([ref], new Map()))[0]!,
    /** Waits for a segment's lock for up to 5 s. */
    acquire: (ref: SegmentRef) => locks.acquire(ref, Date.now() + 5_000),
    /** Releases one lease: false when it had been lost. */
    release: async (lease: LockLease) => (await backend.tryReleaseMany([lease]))[0]!,
    async close() {
      await locks.close();
      notices.close();
      redis.disconnect();
      subscriber.disconnect();
    },
  };
}
