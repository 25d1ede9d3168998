import type { DistributedLock, LockLease } from '../lock/distributed-lock.js';
import { redisKeys } from '../lock/keys.js';
import type { RedisClient } from '../redis/connections.js';
import type { ReleaseNotices } from '../lock/release-notices.js';

/** One segment of one layout of a SKU: what a segment lock guards. */
export interface SegmentRef {
  sku: string;
  layoutVersion: number;
  segment: number;
}

/**
 * The one order in which any caller holding several segment locks takes them: by SKU (code units), then segment. Every
 * multi-lock path (covers, carts, configuration changes, returns) takes its locks in this order, so none can deadlock
 * another.
 */
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

export interface SegmentLockOptions {
  ttlMs: number;
  /** Renew held leases every TTL/3 (LOCK_WATCHDOG); off, a lease simply expires after `ttlMs`. */
  watchdog: boolean;
}

/**
 * The segment locks the order flow and the stock admin take: one lock per (SKU, layout, segment) on the LOCK_BACKEND
 * lock, never re-entered (each acquisition is its own owner), and the waiting for their release, where the callers
 * of one SKU line up. Refusals are answers here: a lock that is busy is null, a release that found the lease gone is
 * false.
 */
export class SegmentLocks {
  /** Leases this process holds, with when each was granted (released on shutdown). */
  private readonly held = new Map<LockLease, number>();

  constructor(
    private readonly backend: DistributedLock,
    private readonly notices: ReleaseNotices,
    /** The service's Redis: release notices go out on it for backends that do not publish them. */
    private readonly publisher: RedisClient,
    private readonly options: SegmentLockOptions,
    private readonly hooks: SegmentLockHooks = {},
  ) {}

  /**
   * True unless a caller of this process holds (or is taking) the lock, or another process was just found holding it.
   * `key`: the segment's `segmentKey`.
   */
  isFree(key: string): boolean {
    return !this.notices.isHeldHere(key) && !this.notices.isHeldElsewhere(key);
  }

  /** True while a caller of this process holds (or is taking) the segment's lock. */
  isHeldHere(ref: SegmentRef): boolean {
    return this.notices.isHeldHere(redisKeys.segmentLock(ref));
  }

  /**
   * One attempt, no waiting; null when the lock is held, here or (as far as this process knows) elsewhere.
   * `askStore`: ask the store even when another process was just found holding it. A caller that will wait for the
   * release does: its attempt marks the lock contended, which is what makes the holder's release announce itself
   * (an uncontended release publishes nothing).
   */
  async tryAcquire(ref: SegmentRef, askStore = false): Promise<LockLease | null> {
    return (await this.attempt([ref], askStore))[0]!;
  }
  /**
   * Waits for the lock until `deadline` (epoch ms), in turn with this process's other waiters; null when out of time.
   * `ticket`: the caller's place in line, if it has been waiting already (an order covering from several segments
   * keeps the place it took on arrival, rather than queueing anew behind everyone for each further segment).
   */
  async acquire(ref: SegmentRef, deadline: number, ticket = this.notices.ticket()): Promise<LockLease | null> {
    await this.listen(ref.sku, [ref]);
    for (;;) {
      const mark = this.notices.mark();
      const lease = await this.tryAcquire(ref, true);
      if (lease) return lease;
      if (Date.now() >= deadline) return null;
      await this.waitForRelease([ref], { ticket, deadline, mark });
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
        const tries = await this.tryAcquireAll(rest);
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
   * `tryAcquire` on each at once: on one Redis server in one script call, on a Cluster one call per lock, all in flight
   * together. If any attempt fails outright, lets go of the others and rethrows.
   */
  tryAcquireAll(refs: readonly SegmentRef[]): Promise<(LockLease | null)[]> {
    return this.attempt(refs, false);
  }

  /**
   * `tryAcquireAll` for a caller that still holds `held` (its last batch's leases, by segment key) and lets go of
   * them now. A held lock it needs again is taken again in the request that lets it go, under a new fencing token,
   * where the backend can and nobody else wants it (`retakeMany`); the rest of `held` is released, in the same round
   * trip as the attempts at the other segments. A lock that could not be taken again is released and tried afresh
   * once the release is through, unless a caller of this process waits for it: that caller gets it, this one not.
   */
  async tryAcquireAllHolding(
    refs: readonly SegmentRef[],
    held: ReadonlyMap<string, LockLease>,
  ): Promise<(LockLease | null)[]> {
    // With combining, batches hand over nothing: the attempts alone, as tryAcquireAll.
    if (held.size === 0) return this.attempt(refs, false);
    const names = refs.map(redisKeys.segmentLock);
    const waited = (i: number) => this.notices.isWaitedFor(names[i]!);
    const indexes = refs.map((_, i) => i);
    const [again, fresh] = [indexes.filter((i) => held.has(names[i]!)), indexes.filter((i) => !held.has(names[i]!))];
    const retaking = this.backend.capabilities.retakes ? again.filter((i) => !waited(i)) : [];
    const keep = new Set(retaking.map((i) => names[i]!));
    const answers: (LockLease | null)[] = refs.map(() => null);
    const settle = (at: number[], leases: (LockLease | null)[]) => at.forEach((i, j) => (answers[i] = leases[j]!));
    const tryAt = (at: number[]) =>
      this.attempt(
        at.map((i) => refs[i]!),
        false,
      );
    try {
      const [retaken, tried] = await Promise.all([
        this.retakeAll(retaking.map((i) => held.get(names[i]!)!)),
        tryAt(fresh).catch((error: unknown) => ({ error })),
        this.releaseAll([...held].flatMap(([name, lease]) => (keep.has(name) ? [] : [lease]))),
      ]);
      settle(retaking, retaken);
      // Not taken again (contended elsewhere, or the backend cannot): let go, then tried like any other.
      await this.releaseAll(retaking.flatMap((i, j) => (retaken[j] ? [] : [held.get(names[i]!)!])));
      if (!Array.isArray(tried)) throw tried.error;
      settle(fresh, tried);
      const retry = again.filter((i) => !answers[i] && !waited(i));
      if (retry.length > 0) settle(retry, await tryAt(retry));
      return answers;
    } catch (error) {
      // Nothing taken here outlives a failed attempt.
      await this.releaseAll(answers.filter((lease) => lease !== null));
      throw error;
    }
  }

  /** `retakeMany`, with this process's bookkeeping: a lease taken again counts as a release and an acquisition. */
  private async retakeAll(leases: LockLease[]): Promise<(LockLease | null)[]> {
    if (leases.length === 0) return [];
    const retaken = await this.backend.retakeMany(leases).catch(() => leases.map(() => null));
    for (const [i, lease] of retaken.entries()) {
      if (!lease) continue;
      const grantedAt = this.held.get(leases[i]!);
      this.held.delete(leases[i]!);
      if (grantedAt !== undefined) this.hooks.onReleased?.(performance.now() - grantedAt);
      this.held.set(lease, performance.now());
      this.hooks.onAcquired?.();
    }
    return retaken;
  }

  private async attempt(refs: readonly SegmentRef[], askStore: boolean): Promise<(LockLease | null)[]> {
    const names = refs.map(redisKeys.segmentLock);
    const asked = names.flatMap((name, i) =>
      (!askStore && this.notices.isHeldElsewhere(name)) || !this.notices.markHeldHere(name) ? [] : [i],
    );
    const mark = this.notices.mark();
    let leases: (LockLease | null)[];
    try {
      leases = await this.backend.tryAcquireMany(
        asked.map((i) => names[i]!),
        { ttlMs: this.options.ttlMs, watchdog: this.options.watchdog },
      );
    } catch (error) {
      for (const i of asked) this.notices.clearHeldHere(names[i]!);
      throw error;
    }
    const answers: (LockLease | null)[] = refs.map(() => null);
    for (const [j, i] of asked.entries()) {
      const lease = leases[j]!;
      if (!lease) {
        this.notices.clearHeldHere(names[i]!);
        this.notices.markHeldElsewhere(names[i]!, mark);
        continue;
      }
      this.held.set(lease, performance.now());
      this.hooks.onAcquired?.();
      answers[i] = lease;
    }
    return answers;
  }

  /** False when the lease had already expired or been taken over: nothing was released then. */
  async release(lease: LockLease): Promise<boolean> {
    return (await this.releaseLeases([lease]))[0]!;
  }

  /**
   * Releases quietly: for paths that are already failing, where a second error would hide the first. A lease the
   * backend refuses to release (not its own, released before) makes it release none of the batch: the rest then go one
   * by one, so none is left to expire for another's sake.
   */
  async releaseAll(leases: Iterable<LockLease>): Promise<void> {
    const list = [...leases];
    await this.releaseLeases(list).catch(() =>
      Promise.all(list.map((lease) => this.releaseLeases([lease]).catch(() => []))),
    );
  }

  /** Every lease in one request where the backend can; rejects if the store failed for any. */
  private async releaseLeases(leases: LockLease[]): Promise<boolean[]> {
    if (leases.length === 0) return [];
    for (const lease of leases) {
      const grantedAt = this.held.get(lease);
      this.held.delete(lease);
      if (grantedAt !== undefined) this.hooks.onReleased?.(performance.now() - grantedAt);
    }
    const publishes = this.backend.capabilities.publishesReleaseNotices;
    let released: boolean[] = leases.map(() => false);
    try {
      released = await this.backend.tryReleaseMany(leases);
      if (!publishes) {
        await Promise.all(
          leases.map((lease, i) =>
            released[i]
              ? this.publisher.spublish(redisKeys.releasedChannel(lease.key), this.notices.instanceId).catch(() => 0)
              : 0,
          ),
        );
      }
      return released;
    } finally {
      // Whatever the store said, this process no longer holds the locks: the next local waiter may try at once. A
      // lock that publishes its notices told them already (and another caller may hold the lock again by now).
      for (const [i, lease] of leases.entries()) if (!(released[i] && publishes)) this.notices.notify(lease.key);
    }
  }

  /** Subscribes to the segments' release notices; call it before the attempt that may lead to a wait. */
  listen(sku: string, refs: readonly SegmentRef[]): Promise<void> {
    return this.notices.listen(sku, refs.map(redisKeys.segmentLock));
  }

  /** A caller's place in line for `waitForRelease`, taken when it arrives. */
  ticket(): number {
    return this.notices.ticket();
  }

  /** Taken before an attempt; passed to `waitForRelease` so that a release during the attempt is not slept through. */
  mark(): number {
    return this.notices.mark();
  }

  /**
   * Waits, in line with this process's other callers for the SKU, until one of `refs` is released or `deadline`
   * passes; resolves with the segment whose release woke the caller.
   */
  async waitForRelease(
    refs: readonly SegmentRef[],
    options: { ticket: number; deadline: number; mark: number; signal?: AbortSignal },
  ): Promise<number | undefined> {
    const segmentOf = new Map(refs.map((ref) => [redisKeys.segmentLock(ref), ref.segment]));
    const name = await this.notices.wait(refs[0]!.sku, new Set(segmentOf.keys()), options);
    return name === undefined ? undefined : segmentOf.get(name);
  }

  /** Wakes every caller waiting for `ref` (or for any segment of the SKU): news no release would bring them. */
  wakeAll(sku: string, ref?: SegmentRef): void {
    this.notices.wakeAll(sku, ref && redisKeys.segmentLock(ref));
  }

  /** Releases what this process holds and closes the backend's own connections. */
  async close(): Promise<void> {
    await this.releaseAll([...this.held.keys()]);
    await this.backend.close();
  }
}
