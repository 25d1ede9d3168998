import type { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import { redisKeys, unlockNotice } from '../keys.js';
import {
  type Hold,
  LockClient,
  type LockClientOptions,
  type StoreGrant,
  type StoreRelease,
  sleepUntilWoken,
  type WaitBudget,
} from '../lock-client.js';
import { defineLockCommands, ScriptResult } from '../scripts.js';
import { segmentRefOf } from '../segment-lock-names.js';

export interface RedisSegmentLockOptions extends LockClientOptions {
  /** The service's connection (shared: never closed here). */
  redis: Redis;
  /** Wraps an unlock notice as the order flow's waiters want it. */
  noticePayload?: (notice: string) => string;
}

/**
 * The segment lock on the service's own Redis (LOCK_BACKEND=redis): the original `SET NX PX` string lock and
 * fencing counter (acquireLock-2.lua and friends), behind the DistributedLock interface so it gains the watchdog and the
 * lease signal. Segments are never re-entered, so the plain string key is enough, and operators and fault tests keep
 * reading the owner with a GET. Names come from segmentLockName; re-entries, should a scope make any, count locally.
 */
export class RedisSegmentLock extends LockClient {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: false, releaseNotices: true };
  private readonly redis: Redis;
  private readonly noticePayload: (notice: string) => string;

  constructor(options: RedisSegmentLockOptions) {
    super(options);
    this.redis = options.redis;
    if (typeof (this.redis as Partial<Redis>).acquireLock !== 'function') defineLockCommands(this.redis);
    this.noticePayload = options.noticePayload ?? ((notice) => notice);
  }

  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const ref = refOf(key);
    const requestedAt = Date.now();
    const result = await this.redis.acquireLock(redisKeys.segmentLock(ref), redisKeys.segmentFence(ref), owner, ttlMs);
    if (!Array.isArray(result)) return null; // ScriptResult.LockHeld
    const [fence, previousFence] = result;
    return { fence, previousFence, leaseMs: ttlMs, requestedAt };
  }

  /** The order flow waits with its own notice waiters; this plain backoff serves other callers of the interface. */
  protected async waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    for (let attempt = 0; ; attempt++) {
      budget.signal?.throwIfAborted();
      const grant = await this.tryStore(key, owner, ttlMs);
      if (grant) return grant;
      const remaining = budget.deadline - Date.now();
      if (remaining <= 0) return null;
      await sleepUntilWoken(Math.min(remaining, Math.min(200, 5 * 2 ** attempt)), budget.signal).promise;
    }
  }

  protected reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return this.extendStore(hold, Math.max(ttlMs, hold.leaseMs));
  }

  protected async releaseStore(hold: Hold, final: boolean): Promise<StoreRelease> {
    if (!final) return 'still-held';
    const ref = refOf(hold.key);
    const result = await this.redis.releaseLock(
      redisKeys.segmentLock(ref),
      hold.owner,
      redisKeys.unlockChannel(ref.sku),
      this.noticePayload(unlockNotice.encode(ref)),
    );
    return result === ScriptResult.Done ? 'released' : 'not-owner';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return (
      (await this.redis.extendLock(redisKeys.segmentLock(refOf(hold.key)), hold.owner, ttlMs)) === ScriptResult.Done
    );
  }

  protected async closeStore(): Promise<void> {}
}

function refOf(name: string) {
  const ref = segmentRefOf(name);
  if (!ref) throw new Error(`'${name}' is not a segment lock name`);
  return ref;
}
