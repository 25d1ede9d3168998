import { redisKeys, unlockNotice } from '../keys.js';
import { segmentRefOf } from '../segment-lock-names.js';

/** Where one lock lives in Redis. Every key of one lock shares a `{hashtag}`: one script touches them all. */
export interface RedisLockKeyspace {
  lock(name: string): string;
  fence(name: string): string;
  queue(name: string): string;
  queueDeadlines(name: string): string;
  /** Published when the lock is freed with nobody queued. */
  releaseNotice(name: string): { channel: string; message: string };
  /** Hand-offs to queued waiters: "waiter\nfence\nleaseMs\nname". */
  readonly grantChannel: string;
}

/** Locks named freely, under `prefix`; one channel carries every release notice of the keyspace. */
export function namedLockKeyspace(prefix = 'lock:'): RedisLockKeyspace {
  return {
    lock: (name) => `${prefix}{${name}}`,
    fence: (name) => `${prefix}fence:{${name}}`,
    queue: (name) => `${prefix}queue:{${name}}`,
    queueDeadlines: (name) => `${prefix}queue-deadlines:{${name}}`,
    releaseNotice: (name) => ({ channel: `${prefix}released`, message: name }),
    grantChannel: `${prefix}granted`,
  };
}

/**
 * The stock segments' locks (names from segmentLockName): the same lock and fencing-counter keys, unlock channel and
 * notice as the order flow's waiters expect, so they keep being woken by releases.
 */
export const segmentLockKeyspace: RedisLockKeyspace = (() => {
  const fallback = namedLockKeyspace('stock:lock:');
  const refOf = (name: string) => segmentRefOf(name);
  return {
    lock: (name) => {
      const ref = refOf(name);
      return ref ? redisKeys.segmentLock(ref) : fallback.lock(name);
    },
    fence: (name) => {
      const ref = refOf(name);
      return ref ? redisKeys.segmentFence(ref) : fallback.fence(name);
    },
    queue: (name) => `stock:lock-queue:{${name}}`,
    queueDeadlines: (name) => `stock:lock-queue-deadlines:{${name}}`,
    releaseNotice: (name) => {
      const ref = refOf(name);
      return ref ? { channel: redisKeys.unlockChannel(ref.sku), message: unlockNotice.encode(ref) } : fallback.releaseNotice(name);
    },
    grantChannel: 'stock:lock-granted',
  };
})();
