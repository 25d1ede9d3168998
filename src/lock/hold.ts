import type { LockLease } from './distributed-lock.js';

/**
 * What a lock client and its backend's store say to each other: what a store grants and answers, the wait budget it
 * is given, the hold a grant becomes (and the leases handed out on it), and the timing helpers every backend shares.
 */

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
  signal?: AbortSignal;
  fair: boolean;
}

/** A store's answer to a release: one hold dropped, or the lock was lost (expired, taken over) and nothing changed. */
export type StoreRelease = 'released' | 'lost';

/** One owner's hold of one key, shared by every lease of a reentrant acquisition. */
export class Hold<H = unknown> {
  depth = 1;
  released = false;
  lost = false;
  validUntil: number;
  readonly controller = new AbortController();
  expiryTimer: NodeJS.Timeout | undefined;
  renewTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly key: string,
    readonly owner: string,
    readonly fence: number,
    readonly previousFence: number | undefined,
    public leaseMs: number,
    readonly handle: H | undefined,
    /** Taken inside an owner scope: only that scope may release it. */
    readonly scoped: boolean,
    readonly watchdog: boolean,
    requestedAt: number,
    /** Called once the last confirmed lease has run out (the store said nothing since). */
    private readonly expired: () => void,
  ) {
    this.validUntil = requestedAt + leaseMs - clockDrift(leaseMs);
    this.armExpiry();
  }

  get done(): boolean {
    return this.released || this.lost;
  }

  /** The store confirmed the lease as of `requestedAt`: it now runs until then plus the lease. */
  confirm(requestedAt: number): void {
    this.validUntil = requestedAt + this.leaseMs - clockDrift(this.leaseMs);
    this.armExpiry();
  }

  stopTimers(): void {
    clearTimeout(this.expiryTimer);
    clearTimeout(this.renewTimer);
  }

  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(this.expired, Math.max(0, this.validUntil - Date.now()));
    this.expiryTimer.unref();
  }
}

/** A lease, as handed to the caller: one per acquisition, sharing its hold with the owner's other re-entries. */
export class Lease<H> implements LockLease {
  released = false;

  constructor(
    /** The client that handed it out: only that client releases it. */
    readonly client: object,
    readonly hold: Hold<H>,
    readonly depth: number,
  ) {}

  get key() {
    return this.hold.key;
  }
  get fence() {
    return this.hold.fence;
  }
  get previousFence() {
    return this.hold.previousFence;
  }
  get owner() {
    return this.hold.owner;
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
