/**
 * What a lock client and its backend's store say to each other: what a store grants and answers, the wait budget it
 * is given, the hold a grant becomes, and the timing helpers every backend shares.
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

export type StoreRelease = 'released' | 'still-held' | 'not-owner';

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
  ) {
    this.validUntil = requestedAt + leaseMs - clockDrift(leaseMs);
  }

  get done(): boolean {
    return this.released || this.lost;
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
