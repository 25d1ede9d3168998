import type { Redis } from 'ioredis';
import { RedisSegmentLock } from './backends/redis-segment.js';
import type { DistributedLock, LockLease } from './distributed-lock.js';
import { LockLostError, NotLockOwnerError } from './errors.js';
import { redisKeys, type SegmentRef, unlockNotice } from './keys.js';
import { segmentLockName } from './segment-lock-names.js';
import type { UnlockWaiters } from './unlock-waiters.js';

/** A held segment lock. `fence` strictly increases per segment: writes to Postgres carry it. */
export interface Lease {
  readonly ref: SegmentRef;
  readonly owner: string;
  readonly fence: number;
  /** The token issued just before `fence` for this segment, when the backend can tell. */
  readonly previousFence: number | undefined;
  /**
   * Aborts with a LockLostError once the lock can no longer be proven held (the watchdog found it gone, or the lease
   * ran out unrenewed): work under the lock should stop; the fenced write stays the last line of defence.
   */
  readonly signal: AbortSignal;
}

export interface SegmentLockOptions {
  /**
   * The lock store (LOCK_BACKEND). Default: the segment lock on `redis` itself (RedisSegmentLock), which publishes the
   * unlock notices the order flow's waiters know. With another backend this class publishes them after each release.
   */
  backend?: DistributedLock;
  /** Renew held leases every TTL/3 (LOCK_WATCHDOG). Default off: a lease then simply expires after `ttlMs`. */
  watchdog?: boolean;
}

/**
 * The segment lock the order flow uses: one lock per (SKU, layout, segment) on the selected DistributedLock backend,
 * never re-entered (each acquisition is its own owner), its unlock notices on the service's Redis, waiting woken by
 * those notices.
 */
export class SegmentLock {
  /** Leases this process holds, released on shutdown. */
  readonly held = new Set<Lease>();
  /** Lock keys held by this process: asking Redis about them again would only cost a round trip to hear "held". */
  private readonly heldKeys = new Set<string>();

  private readonly backend: DistributedLock;
  private readonly watchdog: boolean;
  /** The backend does not publish the order flow's unlock notices on the service's Redis: this class does. */
  private readonly publishesNotices: boolean;
  private readonly backendLeases = new WeakMap<Lease, LockLease>();

  constructor(
    private readonly redis: Redis,
    private readonly waiters: UnlockWaiters,
    private readonly ttlMs: number,
    options: SegmentLockOptions = {},
  ) {
    this.backend =
      options.backend ??
      new RedisSegmentLock({ redis, ttlMs, watchdog: false, noticePayload: (notice) => waiters.noticePayload(notice) });
    this.watchdog = options.watchdog ?? false;
    this.publishesNotices = this.backend.kind !== 'redis';
  }

  /** True while a caller of this process holds (or is taking) the segment's lock. */
  isHeldHere(ref: SegmentRef): boolean {
    return this.heldKeys.has(redisKeys.segmentLock(ref));
  }

  async tryAcquire(ref: SegmentRef): Promise<Lease | null> {
    const key = redisKeys.segmentLock(ref);
    if (this.heldKeys.has(key)) return null;
    const notice = unlockNotice.encode(ref);
    if (this.waiters.isHeldElsewhere(ref.sku, notice)) return null;
    this.heldKeys.add(key);
    let held: LockLease | null;
    try {
      held = await this.backend.tryAcquire(segmentLockName(ref), {
        ttlMs: this.ttlMs,
        watchdog: this.watchdog,
        reentrant: false,
      });
    } catch (error) {
      this.heldKeys.delete(key);
      throw error;
    }
    if (!held) {
      this.heldKeys.delete(key);
      this.waiters.markHeldElsewhere(ref.sku, notice);
      return null;
    }
    const lease: Lease = {
      ref,
      owner: held.owner,
      fence: held.fence,
      previousFence: held.previousFence,
      signal: held.signal,
    };
    this.backendLeases.set(lease, held);
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
    const held = this.backendLeases.get(lease);
    this.backendLeases.delete(lease);
    try {
      if (!held) return false;
      await this.backend.release(held);
      if (this.publishesNotices) {
        await this.redis
          .publish(redisKeys.unlockChannel(lease.ref.sku), this.waiters.noticePayload(notice))
          .catch(() => 0);
      }
      return true;
    } catch (error) {
      if (error instanceof NotLockOwnerError || error instanceof LockLostError) return false;
      throw error;
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

  /** False when the lease had already expired or been taken over. */
  async extend(lease: Lease, leaseMs = this.ttlMs): Promise<boolean> {
    const held = this.backendLeases.get(lease);
    if (!held) return false;
    try {
      await this.backend.extend(held, leaseMs);
      return true;
    } catch (error) {
      if (error instanceof NotLockOwnerError || error instanceof LockLostError) return false;
      throw error;
    }
  }

  /** Stops renewals and closes the backend's own connections (the service's Redis connection is not its own). */
  async close(): Promise<void> {
    await this.backend.close();
  }
}
