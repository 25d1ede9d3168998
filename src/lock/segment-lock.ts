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

/**
 * The segment lock: `SET NX PX` with a random owner and a fencing counter in one script, compare-and-delete
 * release that publishes an unlock notice, waiting woken by those notices.
 */
export class SegmentLock {
  /** Leases this process holds, released on shutdown. */
  readonly held = new Set<Lease>();
  /** Lock keys held by this process: asking Redis about them again would only cost a round trip to hear "held". */
  private readonly heldKeys = new Set<string>();

  constructor(
    private readonly redis: Redis,
    private readonly waiters: UnlockWaiters,
    private readonly ttlMs: number,
  ) {}

  /** True while a caller of this process holds (or is taking) the segment's lock. */
  isHeldHere(ref: SegmentRef): boolean {
    return this.heldKeys.has(redisKeys.segmentLock(ref));
  }

  async tryAcquire(ref: SegmentRef): Promise<Lease | null> {
    const key = redisKeys.segmentLock(ref);
    if (this.heldKeys.has(key)) return null;
    this.heldKeys.add(key);
    const owner = randomUUID();
    let result: number;
    try {
      result = await this.redis.acquireLock(key, redisKeys.segmentFence(ref), owner, this.ttlMs);
    } catch (error) {
      this.heldKeys.delete(key);
      throw error;
    }
    if (result === ScriptResult.LockHeld) {
      this.heldKeys.delete(key);
      return null;
    }
    const lease: Lease = { ref, owner, fence: result };
    this.held.add(lease);
    return lease;
  }

  /** Waits for the lock until `deadline` (epoch ms), in turn with this process's other waiters; null when out of budget. */
  async acquire(ref: SegmentRef, deadline: number): Promise<Lease | null> {
    await this.waiters.prepare(ref.sku);
    const wanted = new Set([unlockNotice.encode(ref)]);
    const since = Date.now();
    for (;;) {
      const mark = this.waiters.mark();
      const lease = await this.tryAcquire(ref);
      if (lease) return lease;
      const remaining = deadline - Date.now();
      if (remaining <= 0) return null;
      await this.waiters.wait(ref.sku, wanted, { since, timeoutMs: remaining, mark });
    }
  }

  /** False when the lease had already expired or been taken over: nothing was released then. */
  async release(lease: Lease): Promise<boolean> {
    this.held.delete(lease);
    const notice = unlockNotice.encode(lease.ref);
    try {
      const result = await this.redis.releaseLock(
        redisKeys.segmentLock(lease.ref),
        lease.owner,
        redisKeys.unlockChannel(lease.ref.sku),
        this.waiters.noticePayload(notice),
      );
      return result === ScriptResult.Done;
    } finally {
      // Whatever Redis said, this process no longer holds the key: the next local waiter may try at once.
      this.heldKeys.delete(redisKeys.segmentLock(lease.ref));
      this.waiters.notify(lease.ref.sku, notice);
    }
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
