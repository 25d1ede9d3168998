import type { DistributedLock, LockLease } from '../lock/distributed-lock.js';
import { LockTimeoutError } from '../lock/errors.js';
import { redisKeys } from '../lock/keys.js';

/** One segment of one layout of a SKU: what a segment lock guards. */
export interface SegmentRef {
  sku: string;
  layoutVersion: number;
  segment: number;
}

/** The one order in which every caller holding several segment locks takes them, so none can deadlock another. */
export function compareRefs(a: SegmentRef, b: SegmentRef): number {
  if (a.sku !== b.sku) return a.sku < b.sku ? -1 : 1;
  return a.segment - b.segment;
}

/** The lock name of a segment, which also names it in this process's maps. */
export function segmentKey(ref: SegmentRef): string {
  return redisKeys.segmentLock(ref);
}

/** Observers of the segment locks (metrics); every hook is optional and must not throw. */
export interface SegmentLockHooks {
  onAcquired?(): void;
  /** How long the lease was held, from the acquisition's answer to the release call. */
  onReleased?(heldMs: number): void;
}

/**
 * The segment locks the order flow and the stock admin take: one lock per (SKU, layout, segment) on the LOCK_BACKEND
 * lock, used through its public methods like any other caller's, each acquisition its own owner (never re-entered).
 * Refusals are answers here: a lock that is busy is null, and a caller out of time holds none.
 */
export class SegmentLocks {
  constructor(
    private readonly lock: DistributedLock,
    /** `watchdog`: renew held leases every TTL/3 (LOCK_WATCHDOG); off, a lease simply expires after `ttlMs`. */
    private readonly options: { ttlMs: number; watchdog: boolean },
    private readonly hooks: SegmentLockHooks = {},
  ) {}

  /** As far as this process knows without asking: nobody here holds, takes or waits for it, nor just found it busy. */
  isFree(key: string): boolean {
    return this.lock.isFree(key);
  }

  /** A caller's place in line, taken when it arrives: waits for a lock serve this process's callers in this order. */
  ticket(): number {
    return this.lock.ticket();
  }

  /** Waits for the lock until `deadline` (epoch ms), in line by `ticket`; null when out of time. */
  async acquire(ref: SegmentRef, deadline: number, ticket = this.ticket()): Promise<LockLease | null> {
    try {
      const lease = await this.lock.acquire(segmentKey(ref), {
        ...this.options,
        waitMs: deadline - Date.now(),
        ticket,
        reentrant: false,
      });
      this.hooks.onAcquired?.();
      return lease;
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
  }

  /**
   * Takes the locks of `refs`, given in ascending segment order, waiting where needed; null (holding none) when out of
   * time. All are tried at once; from the first that was busy on, they are taken in order, waiting for each while
   * holding only those before it (later ones grabbed meanwhile are let go), so two such callers never deadlock, and
   * an uncontended set costs one round of attempts rather than one per segment.
   */
  async acquireInOrder(refs: readonly SegmentRef[], deadline: number, ticket: number): Promise<LockLease[] | null> {
    const leases: LockLease[] = [];
    try {
      for (let rest = refs; rest.length > 0;) {
        const tries = await this.tryAll(rest);
        const firstBusy = tries.indexOf(null);
        if (firstBusy < 0) {
          leases.push(...(tries as LockLease[]));
          break;
        }
        leases.push(...(tries.slice(0, firstBusy) as LockLease[]));
        await this.releaseAll(tries.slice(firstBusy + 1).filter((lease) => lease !== null));
        const waited = await this.acquire(rest[firstBusy]!, deadline, ticket);
        if (!waited) {
          await this.releaseAll(leases);
          return null;
        }
        leases.push(waited);
        rest = rest.slice(firstBusy + 1);
      }
      return leases;
    } catch (error) {
      await this.releaseAll(leases);
      throw error;
    }
  }

  /**
   * One attempt at each of `refs` (null: busy) for a caller that lets go of `held` (its last batch's leases, by key)
   * now, all in one round trip: a held lock it needs again is taken again in the request that lets it go (`retakeMany`,
   * where the lock can and nobody else wants it), the rest released. One not taken again is released and then tried
   * afresh, after any waiter of this process. If an attempt fails outright, lets go of everything and rethrows.
   */
  async tryAcquireAllHolding(
    refs: readonly SegmentRef[],
    held: ReadonlyMap<string, LockLease>,
  ): Promise<(LockLease | null)[]> {
    if (held.size === 0) return this.tryAll(refs);
    const keys = refs.map(segmentKey);
    const indexes = refs.map((_, i) => i);
    const [again, fresh] = [indexes.filter((i) => held.has(keys[i]!)), indexes.filter((i) => !held.has(keys[i]!))];
    const retaking = this.lock.capabilities.retakes ? again : [];
    const kept = new Set(retaking.map((i) => keys[i]!));
    const answers: (LockLease | null)[] = refs.map(() => null);
    const settle = (at: number[], leases: (LockLease | null)[]) => at.forEach((i, j) => (answers[i] = leases[j]!));
    const tryAt = (at: number[]) => this.tryAll(at.map((i) => refs[i]!));
    try {
      const [retaken, tried] = await Promise.all([
        this.retakeAll(retaking.map((i) => held.get(keys[i]!)!)),
        tryAt(fresh).catch((error: unknown) => ({ error })),
        this.releaseAll([...held].flatMap(([key, lease]) => (kept.has(key) ? [] : [lease]))),
      ]);
      settle(retaking, retaken);
      // Not taken again (wanted elsewhere, or the lock cannot): let go, then tried like any other.
      await this.releaseAll(retaking.flatMap((i, j) => (retaken[j] ? [] : [held.get(keys[i]!)!])));
      if (!Array.isArray(tried)) throw tried.error;
      settle(fresh, tried);
      const retry = again.filter((i) => !answers[i]);
      if (retry.length > 0) settle(retry, await tryAt(retry));
      return answers;
    } catch (error) {
      // Nothing taken here outlives a failed attempt.
      await this.releaseAll(answers.filter((lease) => lease !== null));
      throw error;
    }
  }

  /**
   * Releases quietly (for paths already failing, where a second error would hide the first). A lease the lock refuses
   * makes it release none of the batch: the rest then go one by one, so none is left to expire for another's sake.
   */
  async releaseAll(leases: Iterable<LockLease>): Promise<void> {
    const list = [...leases];
    if (list.length === 0) return;
    for (const lease of list) this.hooks.onReleased?.(performance.now() - lease.acquiredAt);
    await this.lock
      .tryReleaseMany(list)
      .catch(() => Promise.all(list.map((lease) => this.lock.tryReleaseMany([lease]).catch(() => []))));
  }

  /** Releases what this process holds and closes the lock's own connections. */
  close(): Promise<void> {
    return this.lock.close();
  }

  private async tryAll(refs: readonly SegmentRef[]): Promise<(LockLease | null)[]> {
    const leases = await this.lock.tryAcquireMany(refs.map(segmentKey), this.options);
    for (const lease of leases) if (lease) this.hooks.onAcquired?.();
    return leases;
  }

  /** `retakeMany`, counted as a release and an acquisition for the metrics. */
  private async retakeAll(leases: LockLease[]): Promise<(LockLease | null)[]> {
    if (leases.length === 0) return [];
    const retaken = await this.lock.retakeMany(leases).catch(() => leases.map(() => null));
    for (const [i, lease] of retaken.entries()) {
      if (!lease) continue;
      this.hooks.onReleased?.(performance.now() - leases[i]!.acquiredAt);
      this.hooks.onAcquired?.();
    }
    return retaken;
  }
}
