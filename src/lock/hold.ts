import type { LockLease } from './distributed-lock.js';

// What a lock client and its store say to each other (grants, answers, budgets), the hold a grant becomes and its leases.

/** What a store hands back for a granted lock. */
export interface StoreGrant<H = unknown> {
  fence: number;
  /** The token issued just before `fence` for this key, where the store can tell. */
  previousFence?: number;
  /** The lease the store actually gave (ZooKeeper: the negotiated session timeout). */
  leaseMs: number;
  /** When the granting request left this process: validity is counted from there, never from the reply. */
  requestedAt: number;
  /** Store-specific state a hold keeps, e.g. its ZooKeeper node. */
  handle?: H;
}

export interface WaitBudget {
  /** Epoch ms after which the wait gives up. */
  deadline: number;
  signal?: AbortSignal | undefined;
  fair: boolean;
  /** The waiter's place among this client's waiters for the lock (AcquireOptions.ticket). */
  ticket: number;
}

/**
 * A store's answer to a release: dropped (`contended`: freed after another process tried to take it), handed on to
 * a waiter of this client without being freed, or lost.
 */
export type StoreRelease = 'released' | 'contended' | 'handed-on' | 'lost';

/** One owner's hold of one key, shared by every lease of a reentrant acquisition. */
export class Hold<H = unknown> {
  depth = 1;
  /** Released by its owner (its store release may still be on its way). */
  ended = false;
  lost = false;
  validUntil: number;
  readonly fence: number;
  readonly previousFence: number | undefined;
  leaseMs: number;
  readonly handle: H | undefined;
  readonly acquiredAt = performance.now();
  readonly controller = new AbortController();
  private expiryTimer: NodeJS.Timeout | undefined;
  private renewTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly key: string,
    readonly owner: string,
    grant: StoreGrant<H>,
    /** Taken inside an owner scope: only that scope may release it. */
    readonly scoped: boolean,
    readonly watchdog: boolean,
    /** The store's renewal (true: renewed; false: the lock is gone; rejects: unknown), and what a loss sets off. */
    private readonly store: { renew: () => Promise<boolean>; lose: (reason: string) => void },
  ) {
    ({ fence: this.fence, previousFence: this.previousFence, leaseMs: this.leaseMs, handle: this.handle } = grant);
    this.validUntil = grant.requestedAt + grant.leaseMs - clockDrift(grant.leaseMs);
    this.armExpiry();
    if (watchdog) this.watch();
  }

  get done(): boolean {
    return this.ended || this.lost;
  }

  /** No longer this owner's: its timers stop. */
  end(): void {
    this.ended = true;
    clearTimeout(this.expiryTimer);
    clearTimeout(this.renewTimer);
  }

  /**
   * The watchdog: renews the lease every third of it while the hold lasts. An unknown answer is tried again next
   * round; the expiry timer fires if the store stays silent past the lease.
   */
  private watch(): void {
    this.renewTimer = setTimeout(
      async () => {
        const requestedAt = Date.now();
        const renewed = await this.store.renew().catch(() => undefined);
        if (this.done) return;
        if (renewed === false) return this.store.lose('the watchdog found it gone');
        if (renewed) this.confirm(requestedAt);
        this.watch();
      },
      Math.max(1, Math.floor(this.leaseMs / 3)),
    );
    this.renewTimer.unref();
  }

  /** The store confirmed the lease as of `requestedAt`: it now runs until then plus the lease. */
  confirm(requestedAt: number): void {
    this.validUntil = requestedAt + this.leaseMs - clockDrift(this.leaseMs);
    this.armExpiry();
  }

  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    // Past the last confirmed expiry nobody can say the lock is still ours: tell the holder.
    const expired = () => this.store.lose(`no renewal was confirmed within its ${this.leaseMs} ms lease`);
    this.expiryTimer = setTimeout(expired, Math.max(0, this.validUntil - Date.now()));
    this.expiryTimer.unref();
  }
}

/** A lease, as handed to the caller: one per acquisition, sharing its hold with the owner's other re-entries. */
export class Lease<H> implements LockLease {
  released = false;

  readonly key: string;
  readonly fence: number;
  readonly previousFence: number | undefined;
  readonly owner: string;
  readonly acquiredAt: number;

  constructor(
    /** The client that handed it out: only that client releases it. */
    readonly client: object,
    readonly hold: Hold<H>,
    readonly depth: number,
  ) {
    ({ key: this.key, fence: this.fence, previousFence: this.previousFence, owner: this.owner } = hold);
    this.acquiredAt = hold.acquiredAt;
  }

  get signal() {
    return this.hold.controller.signal;
  }
  get lost() {
    return this.hold.lost;
  }
}

/** Redlock's allowance for clocks running at different rates: 1 % of the lease plus 2 ms. */
export function clockDrift(leaseMs: number): number {
  return Math.floor(leaseMs * 0.01) + 2;
}

/**
 * Sleeps until `wake` is called, `ms` pass, or `signal` aborts (then rejects with its reason). The returned `wake`
 * may be handed to a notice listener before the sleep starts.
 */
export function sleepUntilWoken(ms: number, signal?: AbortSignal): { promise: Promise<void>; wake: () => void } {
  let wake!: () => void;
  const promise = new Promise<void>((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(done, Math.max(0, ms));
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    wake = done;
  });
  // An abort before the caller awaits (it may start a call first) must not count as an unhandled rejection.
  promise.catch(() => {});
  return { promise, wake };
}
