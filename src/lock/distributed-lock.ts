/**
 * The distributed lock, one interface over several stores (Redis, Redlock over N Redis nodes, Postgres, ZooKeeper).
 *
 * - `acquire` waits (within a budget, abortable), `tryAcquire` does not; both return a {@link LockLease}.
 * - Every successful acquisition carries a fencing token that strictly increases per key, across releases, expiries
 *   and restarts of the store, and across backends (tokens are microseconds since the epoch, or one more than the
 *   last token where that is larger). Writers pass it to the data store, which refuses a write carrying a token
 *   older than one it has already seen: that, not the lock alone, is what keeps data safe when a lease runs out.
 * - Reentrant per logical owner: inside one {@link runAsLockOwner} scope (or `using`), acquiring a held key again
 *   succeeds with the same token and raises the hold count; the lock is released when the count returns to 0.
 *   Outside every scope each acquisition is its own owner.
 * - While a lease is held a watchdog extends it every TTL/3; when an extension finds the lock gone, or the store stays
 *   unreachable past the lease, `lease.signal` aborts with a LockLostError (src/lock/errors.ts).
 */
export { currentLockOwner, runAsLockOwner } from './owner-context.js';

export type LockBackendKind = 'redis' | 'redlock' | 'postgres' | 'zookeeper';

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
}

export interface LockLease {
  readonly key: string;
  /** Strictly increasing per key: pass it with every write the lock protects. */
  readonly fence: number;
  /**
   * The token issued just before `fence` for this key, where the store can tell (the Redis segment lock does); 0 when
   * it remembers none (never issued, or forgotten). If it is the token of the key's last write the caller saw, nobody
   * held the key since that write.
   */
  readonly previousFence?: number | undefined;
  /** The owner id stored with the lock. */
  readonly owner: string;
  /** Hold count after this acquisition (1 for a first acquisition, more when re-entered). */
  readonly depth: number;
  /** Aborts with a LockLostError when the lock can no longer be proven held. */
  readonly signal: AbortSignal;
  /**
   * True once `signal` has aborted. For a caller that only asks, not listens: Node creates a lease's AbortSignal on
   * first use, about 2 µs and an EventTarget per lease, which a batch of orders would otherwise pay for every lock.
   */
  readonly lost: boolean;
}

export interface LockCapabilities {
  /** `fair: true` is honoured. */
  readonly fair: boolean;
  /**
   * Releases publish notices on the service's Redis (ReleaseNotices) themselves: only the `redis` backend. Callers of
   * the other backends publish them, where others wait on those notices.
   */
  readonly publishesReleaseNotices: boolean;
  /** `retakeMany` can take a lock again in the request that lets it go: only the `redis` backend. */
  readonly retakes: boolean;
}

export interface DistributedLock {
  readonly kind: LockBackendKind;
  readonly capabilities: LockCapabilities;

  /** Waits for the lock. Rejects with LockTimeoutError when the budget is spent, or the signal's reason. */
  acquire(key: string, options?: AcquireOptions): Promise<LockLease>;

  /** One attempt, no waiting: null when someone else holds the lock. */
  tryAcquire(key: string, options?: Omit<AcquireOptions, 'waitMs' | 'signal'>): Promise<LockLease | null>;

  /**
   * One attempt at each key, as `tryAcquire` without re-entry (each lease its own owner): leases or nulls in the keys'
   * order. A store that can take several locks in one request does (the Redis lock on one Redis server). If any
   * attempt fails outright, lets go of those taken and rejects.
   */
  tryAcquireMany(
    keys: readonly string[],
    options?: Omit<AcquireOptions, 'waitMs' | 'signal' | 'reentrant'>,
  ): Promise<(LockLease | null)[]>;

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
   * For a holder that needs its locks again at once: each lease, held once and wanted by nobody else, is let go and
   * taken again in one step (one request for all of them where the store can), under a new fencing token and a fresh
   * lease, as a release and a new acquisition would give it, but with no moment in between for anyone to step in.
   * The new lease per lease, or null where the lock was not taken again: it is then still held on the old lease (to be
   * released), or was already lost. Backends without `capabilities.retakes` answer null for every lease.
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
