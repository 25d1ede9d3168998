import { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import Redlock from 'redlock';
import { RedisLock } from '../../src/lock/backends/redis.js';

/** One lock implementation under test: acquire (waiting as long as it takes, or until `stop`), then release. */
export interface Contender {
  readonly name: string;
  /** Resolves with a release function, or rejects (after `stop` aborts, or on the library's own give-up). */
  acquire(key: string, stop: AbortSignal): Promise<() => Promise<unknown>>;
  close(): Promise<void>;
}

/** Long enough that no section here outlives its lease, as in the libraries' own examples. */
const LEASE_MS = 10_000;

export type ContenderName = 'this-lock' | 'this-lock-fair' | 'redlock' | 'redis-semaphore';
export const contenderNames: ContenderName[] = ['this-lock', 'this-lock-fair', 'redlock', 'redis-semaphore'];

/** Each contender gets connections of its own to the same Redis, with each library's default waiting strategy. */
export function createContender(name: ContenderName, redisUrl: string, runId: string): Contender {
  const redis = new Redis(redisUrl);
  switch (name) {
    case 'this-lock':
    case 'this-lock-fair': {
      const fair = name === 'this-lock-fair';
      const lock = new RedisLock({ redis, ttlMs: LEASE_MS, ownsConnection: true });
      return {
        name,
        async acquire(key, stop) {
          const lease = await lock.acquire(`bench:${runId}:${name}:${key}`, { fair, waitMs: 600_000, signal: stop });
          return () => lock.release(lease);
        },
        close: () => lock.close(),
      };
    }
    case 'redlock': {
      // The library's defaults (retry every 200 ms ± 200 ms), except that it never gives up: waiting is the test.
      const redlock = new Redlock([redis], { retryCount: -1 });
      redlock.on('error', () => {});
      return {
        name,
        async acquire(key) {
          const lock = await redlock.acquire([`bench:${runId}:redlock:${key}`], LEASE_MS);
          return () => lock.release();
        },
        close: async () => {
          await redlock.quit().catch(() => redis.disconnect());
        },
      };
    }
    case 'redis-semaphore':
      return {
        name,
        async acquire(key, stop) {
          // The library's defaults (retry every 10 ms), except the acquire timeout: waiting is the test.
          const mutex = new Mutex(redis, `bench:${runId}:semaphore:${key}`, {
            lockTimeout: LEASE_MS,
            acquireTimeout: 600_000,
          });
          await mutex.acquire(stop);
          return () => mutex.release();
        },
        close: async () => {
          await redis.quit().catch(() => redis.disconnect());
        },
      };
  }
}
