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
import type { ReleaseNotices } from './release-notices.js';
import { WaitingLines } from './waiting-lines.js';

export interface LockClientOptions {
  /** Default lease (default 10 s). */
  ttlMs?: number;
  /** Default wait budget of `acquire` (default 2 s). */
  waitMs?: number;
  /** Default for AcquireOptions.watchdog (default true). */
  watchdog?: boolean;
  /** Where waiters hear of releases by other processes (the service's Redis); without, they recheck by themselves. */
  notices?: ReleaseNotices | undefined;
}

/** After freeing a lock another process tried to take, this client's next waiter lets that one (a round trip away) in. */
const YIELD_TO_OTHERS_MS = 5;

type TryOptions = Omit<AcquireOptions, 'waitMs' | 'signal' | 'ticket'>;
type ManyOptions = Pick<AcquireOptions, 'ttlMs' | 'watchdog'>;
type Settled<T> = Promise<PromiseSettledResult<T>[]>;
type Keys = readonly string[];
/** `final`: the owner's last hold, as this client counts. */
type HoldRelease<H> = { hold: Hold<H>; final: boolean };

/**
 * What every backend shares: owner scopes and reentrancy, what this client holds (`holdings`), leases, the watchdog,
 * waiting in line (`lines`). A backend supplies the store operations; Redis and Postgres count re-entries themselves.
 */
export abstract class LockClient<H = unknown> implements DistributedLock {
  abstract readonly kind: LockBackendKind;
  abstract readonly capabilities: LockCapabilities;
  protected readonly defaults: Required<Omit<LockClientOptions, 'notices'>>;
  protected readonly holdings = new Holdings<H>();
  /** Part of every owner id: two clients are two owners even inside one owner scope, like two Redisson clients. */
  protected readonly clientId = newOwnerId();
  protected readonly notices: ReleaseNotices | undefined;
  protected readonly lines: WaitingLines<H>;
  /** The store announces releases itself (Redis's scripts, ZooKeeper's watches); otherwise this client does. */
  protected readonly announcesReleases: boolean = false;
  private tickets = 0;
  /** Set by close(): no new holds are handed out. */
  protected closed = false;

  constructor({ ttlMs = 10_000, waitMs = 2_000, watchdog = true, notices }: LockClientOptions = {}) {
    this.defaults = { ttlMs, waitMs, watchdog };
    this.notices = notices;
    const heldHere = (key: string) => this.holdings.holdOf(key)?.done === false;
    this.lines = new WaitingLines(notices, this.clientId, heldHere, (key) => this.holdings.released(key));
  }

  /** One attempt (null: busy). `fair`: never overtake a queued waiter. */
  protected abstract tryStore(key: string, owner: string, ttlMs: number, fair: boolean): Promise<StoreGrant<H> | null>;
  /**
   * Attempts until granted (a grant) or the budget is spent (null); rejects with the signal's reason on abort. By
   * default in line with this client's other waiters, the first of them trying the store at each release heard.
   */
  protected waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant<H> | null> {
    return this.lines.wait(key, budget, async () => ({ grant: await this.tryStore(key, owner, ttlMs, false) }));
  }
  /** One more hold by its owner: counting stores count it, others check the lock is still there. False: gone. */
  protected abstract reenterStore(hold: Hold<H>, ttlMs: number): Promise<boolean>;
  /** Drops one hold (`final`: the owner's last one, as this process counts). */
  protected abstract releaseStore(hold: Hold<H>, final: boolean): Promise<StoreRelease>;
  /** One attempt at each key (never fair); stores that can ask for several locks in one request override it. */
  protected tryStoreMany(keys: Keys, owners: Keys, ttlMs: number): Settled<StoreGrant<H> | null> {
    return Promise.allSettled(keys.map((key, i) => this.tryStore(key, owners[i]!, ttlMs, false)));
  }
  /** Drops each hold; stores that can release several locks in one request override it. */
  protected releaseStoreMany(releases: readonly HoldRelease<H>[]): Settled<StoreRelease> {
    return Promise.allSettled(releases.map(({ hold, final }) => this.releaseStore(hold, final)));
  }
  /** Takes each final hold again under a new token (`capabilities.retakes`), or says it is left as it was ('busy'). */
  protected retakeStoreMany(holds: readonly Hold<H>[]): Promise<(StoreGrant<H> | 'busy' | 'lost')[]> {
    return Promise.resolve(holds.map(() => 'busy' as const));
  }
  /** True: renewed to `ttlMs`; false: the lock is gone. Rejects when the store cannot tell. */
  protected abstract extendStore(hold: Hold<H>, ttlMs: number): Promise<boolean>;
  protected abstract closeStore(): Promise<void>;

  readonly ticket = (): number => this.tickets++;
  readonly isFree = (key: string): boolean => this.holdings.isFree(key);

  async acquire(key: string, options: AcquireOptions = {}): Promise<LockLease> {
    options.signal?.throwIfAborted();
    const { signal, fair = false, ticket = this.ticket(), waitMs = this.defaults.waitMs } = options;
    const lease = await this.take(key, options, async (owner, ttlMs) => {
      this.holdings.waiting(key, 1);
      const budget = { deadline: Date.now() + waitMs, signal, fair, ticket };
      const grant = await this.waitStore(key, owner, ttlMs, budget).finally(() => this.holdings.waiting(key, -1));
      if (!grant) throw new LockTimeoutError(key, waitMs);
      return grant;
    });
    return lease!;
  }

  tryAcquire(key: string, options: TryOptions = {}): Promise<LockLease | null> {
    return this.take(key, options, async (owner, ttlMs) => {
      if (!this.holdings.startTaking(key)) return null;
      return this.tryStore(key, owner, ttlMs, !!options.fair).finally(() => this.holdings.notTaken(key));
    });
  }

  /** Re-enters the owner's hold of the key, or takes the grant `get` obtains as a new hold. */
  private async take(
    key: string,
    options: AcquireOptions,
    get: (owner: string, ttlMs: number) => Promise<StoreGrant<H> | null>,
  ): Promise<LockLease | null> {
    const { owner, scoped } = this.ownerFor(options);
    const ttlMs = options.ttlMs ?? this.defaults.ttlMs;
    const reentered = await this.reenter(key, owner, ttlMs);
    if (reentered) return reentered;
    if (options.fair && !this.capabilities.fair) throw new UnsupportedLockOptionError(this.kind, 'fair');
    const grant = await get(owner, ttlMs);
    return grant && this.hold(key, owner, scoped, grant, options);
  }

  async tryAcquireMany(keys: Keys, options: ManyOptions = {}): Promise<(LockLease | null)[]> {
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
    return this.drop(
      held.map((lease) => {
        lease.released = true;
        const final = --lease.hold.depth <= 0;
        if (final) lease.hold.end();
        return { hold: lease.hold, final };
      }),
    );
  }

  /** Drops each hold in the store and settles what this client knows of it; rejects if the store failed for any. */
  private async drop(releases: HoldRelease<H>[]): Promise<boolean[]> {
    const outcomes = await this.releaseStoreMany(releases);
    const answers = outcomes.map((outcome, i) => {
      const { hold, final } = releases[i]!;
      const answer = outcome.status === 'fulfilled' ? outcome.value : undefined;
      if (answer === 'lost') this.lose(hold, 'it expired or was taken over before the release');
      else if (final) {
        this.holdings.dropped(hold);
        // Handed on: still held here, by the waiter the lock went to, whose release wakes the next.
        if (answer === 'handed-on') return true;
        // Released, or an unknown outcome (the store frees it at the latest on expiry): the next waiter asks.
        if (answer && !this.announcesReleases) this.notices?.publish(hold.key, this.clientId);
        this.lines.freed(hold.key, answer === 'contended' ? YIELD_TO_OTHERS_MS : 0);
      }
      return answer !== undefined && answer !== 'lost';
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
    const [leaseMs, requestedAt] = [ttlMs ?? hold.leaseMs, Date.now()];
    if (!hold.lost && !(await this.extendStore(hold, leaseMs))) this.lose(hold, 'an extension found it gone');
    if (hold.lost) throw hold.controller.signal.reason as LockLostError;
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
    await this.drop(holds.map((hold) => ({ hold, final: true }))).catch(() => []);
    this.lines.wakeAll();
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

  private async reenter(key: string, owner: string, ttlMs: number): Promise<LockLease | null> {
    const hold = this.holdings.holdOf(key);
    if (!hold || hold.done || hold.owner !== owner) return null;
    if (!(await this.reenterStore(hold, ttlMs))) this.lose(hold, 'it was gone when its owner re-entered');
    if (hold.lost) throw hold.controller.signal.reason as LockLostError;
    hold.depth++;
    return new Lease(this, hold, hold.depth);
  }

  private hold(key: string, owner: string, scoped: boolean, grant: StoreGrant<H>, options: AcquireOptions): LockLease {
    const watchdog = options.watchdog ?? this.defaults.watchdog;
    const hold: Hold<H> = new Hold(key, owner, grant, scoped, watchdog, {
      renew: () => this.extendStore(hold, hold.leaseMs),
      lose: (reason) => this.lose(hold, reason),
    });
    this.holdings.held(hold);
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
    this.holdings.dropped(hold);
    this.lines.freed(hold.key);
    hold.controller.abort(new LockLostError(hold.key, reason));
  }
}
