import type {
  AcquireOptions,
  DistributedLock,
  LockBackendKind,
  LockCapabilities,
  LockLease,
} from './distributed-lock.js';
import { LockLostError, LockTimeoutError, NotLockOwnerError, UnsupportedLockOptionError } from './errors.js';
import { Hold, Lease, type StoreGrant, type StoreRelease, type WaitBudget } from './hold.js';
import { Holdings } from './holdings.js';
import { currentLockOwner, newOwnerId, runAsLockOwner } from './owner-context.js';

export interface LockClientOptions {
  /** Default lease (default 10 s). */
  ttlMs?: number;
  /** Default wait budget of `acquire` (default 2 s). */
  waitMs?: number;
  /** Default for AcquireOptions.watchdog (default true). */
  watchdog?: boolean;
}

type TryOptions = Omit<AcquireOptions, 'waitMs' | 'signal' | 'ticket'>;

/**
 * What every backend shares: owner scopes and reentrancy, what this client holds (`holdings`), leases, the watchdog.
 * A backend supplies the store operations; Redis and Postgres count re-entries in the store, the others here.
 */
export abstract class LockClient<H = unknown> implements DistributedLock {
  abstract readonly kind: LockBackendKind;
  abstract readonly capabilities: LockCapabilities;
  protected readonly defaults: Required<LockClientOptions>;
  protected readonly holdings = new Holdings<H>();
  /** Part of every owner id: two clients are two owners even inside one owner scope, like two Redisson clients. */
  private readonly clientId = newOwnerId();
  private tickets = 0;
  /** Set by close(): no new holds are handed out. */
  protected closed = false;

  constructor({ ttlMs = 10_000, waitMs = 2_000, watchdog = true }: LockClientOptions = {}) {
    this.defaults = { ttlMs, waitMs, watchdog };
  }

  /** One attempt (null: busy). `fair`: never overtake a queued waiter. */
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
  protected holdLost?(hold: Hold<H>): void;

  readonly ticket = (): number => this.tickets++;
  readonly isFree = (key: string): boolean => this.holdings.isFree(key);

  async acquire(key: string, options: AcquireOptions = {}): Promise<LockLease> {
    options.signal?.throwIfAborted();
    const { owner, scoped } = this.ownerFor(options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const reentered = await this.reenter(key, owner, ttlMs);
    if (reentered) return reentered;
    this.checkOptions(key, options);
    const waitMs = options.waitMs ?? this.defaults.waitMs;
    const { signal, fair = false, ticket = this.ticket() } = options;
    this.holdings.waiting(key, 1);
    const grant = await this.waitStore(key, owner, ttlMs, {
      deadline: Date.now() + waitMs,
      signal,
      fair,
      ticket,
    }).finally(() => this.holdings.waiting(key, -1));
    if (!grant) throw new LockTimeoutError(key, waitMs);
    return this.hold(key, owner, scoped, grant, options);
  }

  async tryAcquire(key: string, options: TryOptions = {}): Promise<LockLease | null> {
    const { owner, scoped } = this.ownerFor(options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const reentered = await this.reenter(key, owner, ttlMs);
    if (reentered) return reentered;
    this.checkOptions(key, options);
    if (!this.holdings.startTaking(key)) return null;
    const grant = await this.tryStore(key, owner, ttlMs, !!options.fair).catch((error: unknown) => {
      this.holdings.notTaken(key);
      throw error;
    });
    if (grant) return this.hold(key, owner, scoped, grant, options);
    this.holdings.notTaken(key);
    return null;
  }

  async tryAcquireMany(
    keys: readonly string[],
    options: Omit<TryOptions, 'reentrant'> = {},
  ): Promise<(LockLease | null)[]> {
    for (const key of keys) this.checkOptions(key, options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const asked = keys.flatMap((key, i) => (this.holdings.isFree(key) && this.holdings.startTaking(key) ? [i] : []));
    const owners = asked.map(() => this.ownerFor({ reentrant: false }).owner);
    const heardBefore = this.holdings.heard();
    const tries = await this.tryStoreMany(
      asked.map((i) => keys[i]!),
      owners,
      ttlMs,
    );
    const leases: (LockLease | null)[] = keys.map(() => null);
    for (const [j, i] of asked.entries()) {
      const answer = tries[j]!;
      if (answer.status === 'fulfilled' && answer.value) {
        leases[i] = this.hold(keys[i]!, owners[j]!, false, answer.value, options);
      } else this.holdings.notTaken(keys[i]!, answer.status === 'fulfilled' ? heardBefore : undefined);
    }
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
    const held = leases.map((lease) => this.liveLease(lease, true));
    const releases = held.map((lease) => {
      const hold = lease.hold;
      lease.released = true;
      const final = hold.depth <= 1;
      hold.depth--;
      if (final) hold.end();
      return { hold, final };
    });
    const outcomes = await this.releaseStoreMany(releases);
    const answers = outcomes.map((outcome, i) => {
      const { hold, final } = releases[i]!;
      const answer = outcome.status === 'fulfilled' ? outcome.value : undefined;
      if (answer === 'lost') this.lose(hold, 'it expired or was taken over before the release');
      else if (final) this.holdings.dropped(hold, true);
      return answer === 'released';
    });
    const failed = outcomes.find((outcome) => outcome.status === 'rejected');
    if (failed) throw failed.reason;
    return answers;
  }

  async retakeMany(leases: readonly LockLease[]): Promise<(LockLease | null)[]> {
    const held = leases.map((lease) => this.liveLease(lease, true));
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
      [held[i]!.released, hold.depth] = [true, 0];
      hold.end();
      retaken[i] = this.hold(hold.key, hold.owner, hold.scoped, answer, { watchdog: hold.watchdog });
    }
    return retaken;
  }

  async extend(lease: LockLease, ttlMs?: number): Promise<void> {
    const { hold } = this.liveLease(lease);
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
      const result = await fn(lease).catch(async (error: unknown) => {
        await this.release(lease).catch(() => {});
        throw error;
      });
      if (!lease.lost) return (await this.release(lease), result);
      await this.release(lease).catch(() => {});
      throw lease.signal.reason;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const holds = this.holdings.holds().filter((hold) => !hold.done);
    for (const hold of holds) hold.end();
    await Promise.allSettled(holds.map((hold) => this.releaseStore(hold, true)));
    await this.closeStore();
  }

  /** Fires every hold's signal: for stores that learn of a loss wholesale (an expired ZooKeeper session). */
  protected loseAll(reason: string, match: (hold: Hold<H>) => boolean = () => true): void {
    for (const hold of this.holdings.holds()) if (!hold.done && match(hold)) this.lose(hold, reason);
  }

  private ownerFor(options: Pick<AcquireOptions, 'reentrant'>): { owner: string; scoped: boolean } {
    const scope = options.reentrant === false ? undefined : currentLockOwner();
    return { owner: `${this.clientId}:${scope ?? newOwnerId()}`, scoped: !!scope };
  }

  private checkOptions(key: string, options: AcquireOptions): void {
    if (options.fair && !this.capabilities.fair) throw new UnsupportedLockOptionError(key, this.kind, 'fair');
  }

  private async reenter(key: string, owner: string, ttlMs: number): Promise<LockLease | null> {
    const hold = this.holdings.holdOf(key);
    if (!hold || hold.done || hold.owner !== owner) return null;
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
      grant,
      scoped,
      options.watchdog ?? this.defaults.watchdog,
      // Past the last confirmed expiry nobody can say the lock is still ours: tell the holder.
      () => this.lose(hold, `no renewal was confirmed within its ${hold.leaseMs} ms lease`),
    );
    this.holdings.held(hold);
    const renew = () => this.extendStore(hold, hold.leaseMs);
    if (hold.watchdog) hold.watch(renew, () => this.lose(hold, 'the watchdog found it gone'));
    return new Lease(this, hold, 1);
  }

  /** The lease as this client issued it, still held; `toRelease`: by the owner scope that took it. */
  private liveLease(lease: LockLease, toRelease = false): Lease<H> {
    if (!(lease instanceof Lease) || lease.client !== this) {
      throw new NotLockOwnerError(lease.key, 'the lease was not issued by this client');
    }
    if (lease.released) throw new NotLockOwnerError(lease.key, 'this lease was already released');
    const { scoped, owner } = (lease as Lease<H>).hold;
    if (toRelease && scoped && `${this.clientId}:${currentLockOwner()}` !== owner) {
      throw new NotLockOwnerError(lease.key, 'it was taken by another owner scope');
    }
    return lease as Lease<H>;
  }

  private lose(hold: Hold<H>, reason: string): void {
    if (hold.lost) return;
    hold.lost = true;
    hold.end();
    this.holdLost?.(hold);
    this.holdings.dropped(hold, true);
    hold.controller.abort(new LockLostError(hold.key, reason));
  }
}
