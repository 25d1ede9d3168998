import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { redisKeys, unlockNotice, type SegmentRef } from './keys.js';
import { ScriptResult } from './scripts.js';
import type { UnlockWaiters } from './unlock-waiters.js';

/** A held segment lock. `fence` strictly increases per segment: writes to Postgres carry it. */
export interface Lease {
  readonly ref: SegmentRef;
  readonly owner: string;
  readonly fence: number;
}

/** Longest single sleep between attempts when no unlock notice arrives. */
const MAX_BACKOFF_MS = 200;

/**
 * The segment lock: `SET NX PX` with a random owner and a fencing counter in one script, compare-and-delete
 * release that publishes an unlock notice, waiting woken by those notices.
 */
export class SegmentLock {
  /** Leases this process holds, released on shutdown. */
  readonly held = new Set<Lease>();

  constructor(
    private readonly redis: Redis,
    private readonly waiters: UnlockWaiters,
    private readonly ttlMs: number,
  ) {}

  async tryAcquire(ref: SegmentRef): Promise<Lease | null> {
    const owner = randomUUID();
    const result = await this.redis.acquireLock(redisKeys.segmentLock(ref), redisKeys.segmentFence(ref), owner, this.ttlMs);
    if (result === ScriptResult.LockHeld) return null;
    const lease: Lease = { ref, owner, fence: result };
    this.held.add(lease);
    return lease;
  }

  /** Waits for the lock until `deadline` (epoch ms); null when the budget ran out. */
  async acquire(ref: SegmentRef, deadline: number): Promise<Lease | null> {
    await this.waiters.prepare(ref.sku);
    const wanted = new Set([unlockNotice.encode(ref)]);
    for (let attempt = 0; ; attempt++) {
      const lease = await this.tryAcquire(ref);
      if (lease) return lease;
      const remaining = deadline - Date.now();
      if (remaining <= 0) return null;
      await this.waiters.wait(ref.sku, wanted, Math.min(remaining, backoffMs(attempt)));
    }
  }

  /** False when the lease had already expired or been taken over: nothing was released then. */
  async release(lease: Lease): Promise<boolean> {
    this.held.delete(lease);
    const result = await this.redis.releaseLock(
      redisKeys.segmentLock(lease.ref),
      lease.owner,
      redisKeys.unlockChannel(lease.ref.sku),
      unlockNotice.encode(lease.ref),
    );
    return result === ScriptResult.Done;
  }

  /** Releases quietly: used on paths that are already failing, where a second error would hide the first. */
  async releaseQuietly(leases: Iterable<Lease>): Promise<void> {
    await Promise.all([...leases].map((lease) => this.release(lease).catch(() => false)));
  }

  async extend(lease: Lease, leaseMs = this.ttlMs): Promise<boolean> {
    const result = await this.redis.extendLock(redisKeys.segmentLock(lease.ref), lease.owner, leaseMs);
    return result === ScriptResult.Done;
  }
}

/** Exponential backoff with jitter: 5, 10, 20 … ms, capped; the unlock notice usually ends the wait sooner. */
export function backoffMs(attempt: number): number {
  const base = Math.min(MAX_BACKOFF_MS, 5 * 2 ** attempt);
  return base / 2 + Math.random() * (base / 2);
}
