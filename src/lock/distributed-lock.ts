/**
 * The distributed lock, one interface over several stores (Redis, Redlock over N Redis nodes, Postgres, ZooKeeper).
 *
 * - `acquire` waits (within a budget, abortable, in line with this client's other waiters), `tryAcquire` does not.
 * - Every acquisition carries a fencing token that strictly increases per key, across releases, expiries, restarts
 *   and backends (µs since the epoch, or last + 1 where larger). The data store refuses a write carrying a token
 *   older than one it has seen: that, not the lock alone, keeps data safe when a lease runs out.
 * - Reentrant per logical owner: inside one `runAsLockOwner` scope (owner-context.ts) or `using`, acquiring a held key again
 *   succeeds with the same token and raises the hold count; the lock is released when the count returns to 0.
 *   Outside every scope each acquisition is its own owner.
 * - While a lease is held a watchdog extends it every TTL/3; when an extension finds the lock gone, or the store stays
 *   unreachable past the lease, `lease.signal` aborts with a LockLostError (src/lock/errors.ts).
 */
export type LockBackendKind = 'redis' | 'redlock' | 'postgres' | 'zookeeper';

/**
 * How long a lock an attempt found busy elsewhere counts as busy without asking the store again (`isFree`), unless
 * its release is heard first; callers that plan around busy locks look again after as long.
 */
export const BUSY_ELSEWHERE_MS = 20;

export interface AcquireOptions {
  /** Lease length; the watchdog renews it while held. Defaults to the backend's TTL. */
  ttlMs?: number;
  /** How long `acquire` may wait. Defaults to the backend's wait budget. */
  waitMs?: number;
  /** Aborts the wait (not a held lease): `acquire` rejects with the signal's reason. */
  signal?: AbortSignal;
  /** First come, first served across processes (Redis: a queue with hand-off; ZooKeeper: always). */
  fair?: boolean;
  /** Renew the lease every TTL/3 while held (default true). Without it the lease simply expires after its TTL. */
  watchdog?: boolean;
  /** False: a fresh owner for this acquisition even inside an owner scope, so it never re-enters. Default true. */
  reentrant?: boolean;
  /**
   * The caller's place among this client's waiters for the key, from `ticket()`: a caller that waits for several locks
   * in turn keeps the place it took on arrival. Default: a new ticket (the back of the line).
   */
  ticket?: number;
}

export interface LockLease {
  readonly key: string;
  /** Strictly increasing per key: pass it with every write the lock protects. */
  readonly fence: number;
  /** The token issued just before `fence` where the store can tell (Redis), else 0: nobody held the key since it. */
  readonly previousFence?: number | undefined;
  /** The owner id stored with the lock. */
  readonly owner: string;
  /** Hold count after this acquisition (1 for a first acquisition, more when re-entered). */
  readonly depth: number;
  /** Aborts with a LockLostError when the lock can no longer be proven held. */
  readonly signal: AbortSignal;
  /** True once `signal` has aborted: for a caller that only asks, so that no AbortSignal is made for each lease. */
  readonly lost: boolean;
  /** When the lock was granted, on `performance.now()`'s clock. */
  readonly acquiredAt: number;
}

export interface LockCapabilities {
  /** `fair: true` is honoured. */
  readonly fair: boolean;
  /** `retakeMany` can take a lock again in the request that lets it go: only the `redis` backend. */
  readonly retakes: boolean;
}

export interface DistributedLock {
  readonly kind: LockBackendKind;
  readonly capabilities: LockCapabilities;
  /** Waits for the lock. Rejects with LockTimeoutError when the budget is spent, or the signal's reason. */
  acquire(key: string, options?: AcquireOptions): Promise<LockLease>;
  /**
   * One attempt, no waiting: null when busy (another owner holds the lock, or a caller of this client is taking or
   * waiting for it: a try never overtakes this client's waiters).
   */
  tryAcquire(key: string, options?: Omit<AcquireOptions, 'waitMs' | 'signal' | 'ticket'>): Promise<LockLease | null>;
  /**
   * One attempt at each key, as `tryAcquire` without re-entry: leases or nulls in the keys' order, in one request where
   * the store can. A key that is not `isFree` is busy without asking. If any attempt fails, lets go of all and rejects.
   */
  tryAcquireMany(
    keys: readonly string[],
    options?: Pick<AcquireOptions, 'ttlMs' | 'watchdog'>,
  ): Promise<(LockLease | null)[]>;
  /**
   * As far as this client knows without asking the store: none of its owners holds, takes or waits for the lock, and
   * no attempt found it busy elsewhere in the last `BUSY_ELSEWHERE_MS` unless its release was heard since.
   */
  isFree(key: string): boolean;
  /** A new place in line among this client's waiters (AcquireOptions.ticket): later tickets wait behind earlier ones. */
  ticket(): number;
  /**
   * Drops one hold. Rejects with NotLockOwnerError, changing nothing, when the caller is not the owner: a lease taken
   * in another owner scope, a lease already released, or a lock that expired and was taken over.
   */
  release(lease: LockLease): Promise<void>;
  /** Drops one hold, like `release`, but answers false instead of rejecting when the lock expired or was taken over. */
  tryRelease(lease: LockLease): Promise<boolean>;
  /**
   * `tryRelease` on each lease, in one request where the store can: true or false per lease. Rejects, after trying
   * every one, if the store failed for any (those leases are no longer counted as held here; they expire).
   */
  tryReleaseMany(leases: readonly LockLease[]): Promise<boolean[]>;
  /**
   * For a holder that needs its locks again at once: each lease held once and wanted by nobody else is let go and taken
   * again in one step (one request where the store can), under a new token and lease, with no moment between for
   * anyone to step in. The new lease, or null: still held on the old lease (to release), or lost. Without
   * `capabilities.retakes`, always null.
   */
  retakeMany(leases: readonly LockLease[]): Promise<(LockLease | null)[]>;
  /** Renews the lease (to `ttlMs`, default its TTL). Rejects with LockLostError when the lock is gone. */
  extend(lease: LockLease, ttlMs?: number): Promise<void>;
  /**
   * Acquires, runs `fn` as the lock's owner (nested `using` calls re-enter), releases. If the lock was lost while
   * `fn` ran, rejects with that LockLostError even when `fn` resolved: its effects were not exclusive.
   */
  using<T>(key: string, fn: (lease: LockLease) => Promise<T>, options?: AcquireOptions): Promise<T>;
  /** Releases what this client still holds, stops its timers and closes the connections it owns. */
  close(): Promise<void>;
}
