import { Redis } from 'ioredis';
import { SegmentLocks } from '../../src/inventory/segment-locks.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import type { DistributedLock } from '../../src/lock/distributed-lock.js';
import { ReleaseNotices } from '../../src/lock/release-notices.js';

/**
 * The segment locks as one service process has them: its own Redis connections, release notices and lock client
 * (the `redis` backend unless another is given). Two of these are two processes.
 */
export function segmentLocksProcess(
  redisUrl: string,
  options: { ttlMs: number; watchdog?: boolean; backend?: (redis: Redis, notices: ReleaseNotices) => DistributedLock },
) {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  const subscriber = new Redis(redisUrl);
  for (const connection of [redis, subscriber]) connection.on('error', () => {});
  const notices = new ReleaseNotices(subscriber);
  const backend =
    options.backend?.(redis, notices) ?? new RedisLock({ redis, notices, ttlMs: options.ttlMs, watchdog: false });
  const locks = new SegmentLocks(backend, notices, redis, {
    ttlMs: options.ttlMs,
    watchdog: options.watchdog ?? false,
  });
  return {
    locks,
    redis,
    async close() {
      await locks.close();
      notices.close();
      redis.disconnect();
      subscriber.disconnect();
    },
  };
}
