import type {
  AcquireOptions,
  DistributedLock,
  LockBackendKind,
  LockCapabilities,
  LockLease,
} from './distributed-lock.js';
import { LockLostError, LockTimeoutError, NotLockOwnerError, UnsupportedLockOptionError } from './errors.js';
import { Hold, Lease, type StoreGrant, type StoreRelease, type WaitBudget } from './hold.js';
import { currentLockOwner, newOwnerId, runAsLockOwner } from './owner-context.js';

export interface LockClientOptions {
  /** Default lease (default 10 s). */
  ttlMs?: number;
  /** Default wait budget of `acquire` (default 2 s). */
  waitMs?: number;
  /** Default for AcquireOptions.watchdog (default true). */
  watchdog?: boolean;
}

/**
 * What every backend shares: owner scopes and reentrancy, leases and their signals, the watchdog, `using`. A backend
 * supplies the store operations; counting stores (Redis, Postgres) keep the hold count themselves, the others
 * (Redlock, ZooKeeper) keep one store entry per hold and let this class count re-entries.
 */
export abstract class LockClient<H = unknown> implements DistributedLock {
  abstract readonly kind: LockBackendKind;
  abstract readonly capabilities: LockCapabilities;
  protected readonly defaults: Required<LockClientOptions>;
  private readonly holds = new Map<string, Hold<H>>();
  /** Part of every owner id: two clients are two owners even inside one owner scope, like two Redisson clients. */
  private readonly clientId = newOwnerId();
  /** Set by close(): no new holds are handed out. */
  protected closed = false;

  constructor(options: LockClientOptions = {}) {
    this.defaults = {
      ttlMs: options.ttlMs ?? 10_000,
      waitMs: options.waitMs ?? 2_000,
      watchdog: options.watchdog ?? true,
    };
  }

  /** One attempt. `fair`: never overtake a queued waiter. */
  protected abstract tryStore(key: string, owner: string, ttlMs: number, fair: boolean): Promise<StoreGrant<H> | null>;
  /** Attempts until granted (a grant) or the budget is spent (null); rejects with the signal's reason on abort. */
  protected abstract waitStore(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<H> | null>;
  /** One more hold by its owner: counting stores count it, others check the lock is still there. False: gone. */
  protected abstract reenterStore(hold: Hold<H>, ttlMs: number): Promise<boolean>;
  /** Drops one hold (`final`: the owner's last one, as this process counts). */
  protected abstract releaseStore(hold: Hold<H>, final: boolean): Promise<StoreRelease>;
  /** One attempt at each key (never fair); stores that can ask for several locks in one request override it. */
  protected tryStoreMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
  ): Promise<PromiseSettledResult<StoreGrant<H> | null>[]> {
    return Promise.allSettled(keys.map((key, i) => this.tryStore(key, owners[i]!, ttlMs, false)));
  }
  /** Drops each hold; stores that can release several locks in one request override it. */
  protected releaseStoreMany(
    releases: readonly { hold: Hold<H>; final: boolean }[],
  ): Promise<PromiseSettledResult<StoreRelease>[]> {
    return Promise.allSettled(releases.map(({ hold, final }) => this.releaseStore(hold, final)));
  }
  /**
   * Takes each final hold again in one step under a new token (`capabilities.retakes`): a grant, 'busy' where the
   * store left the hold as it was (someone else wants the lock), 'lost' where the lock was gone. By default, for stores
   * that cannot, every hold is left as it is.
   */
  protected retakeStoreMany(holds: readonly Hold<H>[]): Promise<(StoreGrant<H> | 'busy' | 'lost')[]> {
    return Promise.resolve(holds.map(() => 'busy' as const));
  }
  /** True: renewed to `ttlMs`; false: the lock is gone. Rejects when the store cannot tell. */
  protected abstract extendStore(hold: Hold<H>, ttlMs: number): Promise<boolean>;
  protected abstract closeStore(): Promise<void>;
  /** The hold was lost (not released): stores that track holders locally forget it here. */
  protected holdLost(hold: Hold<H>): void {
    void hold;
  }

  async acquire(key: string, options: AcquireOptions = {}): Promise<LockLease> {
    options.signal?.throwIfAborted();
    const { owner, scoped } = this.ownerFor(options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const reentered = await this.reenter(key, owner, ttlMs);
    if (reentered) return reentered;
    this.checkOptions(key, options);
    const waitMs = options.waitMs ?? this.defaults.waitMs;
    const grant = await this.waitStore(key, owner, ttlMs, {
      deadline: Date.now() + waitMs,
      signal: options.signal,
      fair: !!options.fair,
    });
    if (!grant) throw new LockTimeoutError(key, waitMs);
    return this.hold(key, owner, scoped, grant, options);
  }

  async tryAcquire(key: string, options: Omit<AcquireOptions, 'waitMs' | 'signal'> = {}): Promise<LockLease | null> {
    const { owner, scoped } = this.ownerFor(options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const reentered = await this.reenter(key, owner, ttlMs);
    if (reentered) return reentered;
    this.checkOptions(key, options);
    const grant = await this.tryStore(key, owner, ttlMs, !!options.fair);
    return grant ? this.hold(key, owner, scoped, grant, options) : null;
  }

  async tryAcquireMany(
    keys: readonly string[],
    options: Omit<AcquireOptions, 'waitMs' | 'signal' | 'reentrant'> = {},
  ): Promise<(LockLease | null)[]> {
    for (const key of keys) this.checkOptions(key, options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const owners = keys.map(() => this.ownerFor({ reentrant: false }).owner);
    const tries = await this.tryStoreMany(keys, owners, ttlMs);
    const leases = tries.map((t, i) =>
      t.status === 'fulfilled' && t.value ? this.hold(keys[i]!, owners[i]!, false, t.value, options) : null,
    );
    const failed = tries.find((t) => t.status === 'rejected');
    if (failed) {
      await this.tryReleaseMany(leases.filter((lease) => lease !== null)).catch(() => []);
      throw failed.reason;
    }
    return leases;
  }

  async release(lease: LockLease): Promise<void> {
    if (!(await this.tryRelease(lease))) throw new NotLockOwnerError(lease.key, 'it expired or was taken over');
  }

  async tryRelease(lease: LockLease): Promise<boolean> {
    return (await this.tryReleaseMany([lease]))[0]!;
  }

  async tryReleaseMany(leases: readonly LockLease[]): Promise<boolean[]> {
    // Every lease is checked before any is released: a wrong one changes nothing.
    const held = leases.map((lease) => this.leaseToRelease(lease));
    const releases = held.map((lease) => {
      const hold = lease.hold;
      lease.released = true;
      const final = hold.depth <= 1;
      hold.depth--;
      if (final) this.retire(hold);
      return { hold, final };
    });
    const outcomes = await this.releaseStoreMany(releases);
    const answers = outcomes.map((outcome, i) => {
      const { hold } = releases[i]!;
      if (outcome.status === 'rejected') return false;
      if (outcome.value === 'lost') {
        this.lose(hold, 'it expired or was taken over before the release');
        return false;
      }
      return true;
    });
    const failed = outcomes.find((outcome) => outcome.status === 'rejected');
    if (failed) throw failed.reason;
    return answers;
  }

  async retakeMany(leases: readonly LockLease[]): Promise<(LockLease | null)[]> {
    const held = leases.map((lease) => this.leaseToRelease(lease));
    // A re-entered hold is its owner's to finish; a hold kept past its lease by nobody's word is not taken again.
    const asked = held.flatMap((lease, i) => (lease.hold.depth === 1 && !lease.hold.lost ? [i] : []));
    const answers = await this.retakeStoreMany(asked.map((i) => held[i]!.hold));
    const retaken: (LockLease | null)[] = leases.map(() => null);
    for (const [j, i] of asked.entries()) {
      const { hold } = held[i]!;
      const answer = answers[j]!;
      if (answer === 'lost') this.lose(hold, 'it expired or was taken over before it was taken again');
      if (answer === 'busy' || answer === 'lost') continue;
      // The old lease is over, exactly as if released; the new one is a hold of its own, under the same owner.
      held[i]!.released = true;
      hold.depth = 0;
      this.retire(hold);
      retaken[i] = this.hold(hold.key, hold.owner, hold.scoped, answer, { watchdog: hold.watchdog });
    }
    return retaken;
  }

  private leaseToRelease(lease: LockLease): Lease<H> {
    if (!(lease instanceof Lease) || lease.client !== this) {
      throw new NotLockOwnerError(lease.key, 'the lease was not issued by this client');
    }
    const held = lease as Lease<H>;
    if (held.released) throw new NotLockOwnerError(held.key, 'this lease was already released');
    if (held.hold.scoped && `${this.clientId}:${currentLockOwner()}` !== held.hold.owner) {
      throw new NotLockOwnerError(held.key, 'it was taken by another owner scope');
    }
    return held;
  }

  async extend(lease: LockLease, ttlMs?: number): Promise<void> {
    const hold = this.holdOf(lease);
    if (hold.lost) throw hold.controller.signal.reason as LockLostError;
    const leaseMs = ttlMs ?? hold.leaseMs;
    const requestedAt = Date.now();
    if (!(await this.extendStore(hold, leaseMs))) {
      this.lose(hold, 'an extension found it gone');
      throw hold.controller.signal.reason as LockLostError;
    }
    hold.leaseMs = leaseMs;
    hold.confirm(requestedAt);
  }

  using<T>(key: string, fn: (lease: LockLease) => Promise<T>, options?: AcquireOptions): Promise<T> {
    return runAsLockOwner(async () => {
      const lease = await this.acquire(key, options);
      let result: T;
      try {
        result = await fn(lease);
      } catch (error) {
        await this.release(lease).catch(() => {});
        throw error;
      }
      if (lease.lost) {
        await this.release(lease).catch(() => {});
        throw lease.signal.reason;
      }
      await this.release(lease);
      return result;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const holds = [...this.holds.values()];
    for (const hold of holds) this.retire(hold);
    await Promise.allSettled(holds.map((hold) => this.releaseStore(hold, true)));
    await this.closeStore();
  }

  /** Fires every hold's signal: for stores that learn of a loss wholesale (an expired ZooKeeper session). */
  protected loseAll(reason: string, match: (hold: Hold<H>) => boolean = () => true): void {
    for (const hold of [...this.holds.values()]) if (match(hold)) this.lose(hold, reason);
  }

  private ownerFor(options: Pick<AcquireOptions, 'reentrant'>): { owner: string; scoped: boolean } {
    const scope = options.reentrant === false ? undefined : currentLockOwner();
    return scope
      ? { owner: `${this.clientId}:${scope}`, scoped: true }
      : { owner: `${this.clientId}:${newOwnerId()}`, scoped: false };
  }

  private checkOptions(key: string, options: AcquireOptions): void {
    if (options.fair && !this.capabilities.fair) throw new UnsupportedLockOptionError(key, this.kind, 'fair');
  }

  private async reenter(key: string, owner: string, ttlMs: number): Promise<LockLease | null> {
    const hold = this.holds.get(holdId(owner, key));
    if (!hold || hold.done) return null;
    if (!(await this.reenterStore(hold, ttlMs))) {
      this.lose(hold, 'it was gone when its owner re-entered');
      throw hold.controller.signal.reason as LockLostError;
    }
    hold.depth++;
    return new Lease(this, hold, hold.depth);
  }

  private hold(key: string, owner: string, scoped: boolean, grant: StoreGrant<H>, options: AcquireOptions): LockLease {
    const hold = new Hold<H>(
      key,
      owner,
      grant.fence,
      grant.previousFence,
      grant.leaseMs,
      grant.handle,
      scoped,
      options.watchdog ?? this.defaults.watchdog,
      grant.requestedAt,
      // Past the last confirmed expiry nobody can say the lock is still ours: tell the holder.
      () => this.lose(hold, `no renewal was confirmed within its ${hold.leaseMs} ms lease`),
    );
    this.holds.set(holdId(owner, key), hold);
    if (hold.watchdog) this.scheduleRenewal(hold);
    return new Lease(this, hold, 1);
  }

  private holdOf(lease: LockLease): Hold<H> {
    if (!(lease instanceof Lease) || lease.client !== this || lease.released) {
      throw new NotLockOwnerError(lease.key, 'the lease is not a live lease of this client');
    }
    return (lease as Lease<H>).hold;
  }

  private scheduleRenewal(hold: Hold<H>): void {
    hold.renewTimer = setTimeout(() => void this.renew(hold), Math.max(1, Math.floor(hold.leaseMs / 3)));
    hold.renewTimer.unref();
  }

  private async renew(hold: Hold<H>): Promise<void> {
    if (hold.done) return;
    const requestedAt = Date.now();
    let renewed: boolean | undefined;
    try {
      renewed = await this.extendStore(hold, hold.leaseMs);
    } catch {
      // Unknown: try again next round; the expiry timer fires if the store stays silent past the lease.
      renewed = undefined;
    }
    if (hold.done) return;
    if (renewed === false) return this.lose(hold, 'the watchdog found it gone');
    if (renewed) hold.confirm(requestedAt);
    this.scheduleRenewal(hold);
  }

  private retire(hold: Hold<H>): void {
    hold.released = true;
    hold.stopTimers();
    if (this.holds.get(holdId(hold.owner, hold.key)) === hold) this.holds.delete(holdId(hold.owner, hold.key));
  }

  private lose(hold: Hold<H>, reason: string): void {
    if (hold.lost) return;
    hold.lost = true;
    hold.stopTimers();
    if (this.holds.get(holdId(hold.owner, hold.key)) === hold) this.holds.delete(holdId(hold.owner, hold.key));
    this.holdLost(hold);
    hold.controller.abort(new LockLostError(hold.key, reason));
  }
}

const holdId = (owner: string, key: string) => `${owner}\u0000${key}`;
