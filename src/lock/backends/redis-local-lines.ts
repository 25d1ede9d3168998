import { type Hold, sleepUntilWoken, type StoreGrant, type WaitBudget } from '../hold.js';
import { redisKeys } from '../keys.js';
import type { ReleaseNotices } from '../release-notices.js';

/** Longest sleep of a waiter behind the first of its line, which a hand-off or the first's leaving cuts short. */
const MAX_SLEEP_MS = 1_000;
/** Longest sleep of the first waiter without a release notice: the holder may have died, or the notice was lost. */
const HEAD_RECHECK_MS = 50;

/** Redis holds the lock for this client, under one owner id, with a block of fencing tokens reserved for it. */
export interface Tenure {
  readonly redisOwner: string;
  nextFence: number;
  readonly lastFence: number;
  readonly leaseMs: number;
  /** When Redis last confirmed the lease: a hold passed on locally is valid only as long as that lease. */
  confirmedAt: number;
}

/** One attempt at Redis for the first waiter in line: a grant, or how long the holder's lease has left (`pttl`). */
export type RedisAttempt = (reserve: number) => Promise<{ grant: StoreGrant<Tenure> | null; pttl: number }>;

/** A waiter of this client for one lock, in non-fair mode. */
interface LocalWaiter {
  readonly ticket: number;
  /** Set by a release that passed the lock on within this client. */
  grant: StoreGrant<Tenure> | undefined;
  wake: () => void;
}

/** This client's waiters for one lock, by ticket, and the releases of it heard so far. */
interface LocalLine {
  readonly waiters: LocalWaiter[];
  releases: number;
}

/**
 * The Redis lock's non-fair mode (lock cohorting): the waiters of one client for a lock line up here by ticket, and
 * only the first talks to Redis, woken by the lock's release notice. A holder that took the lock from Redis reserved a
 * block of fencing tokens with it (its tenure, the hold's handle); while its process has waiters and tokens remain, a
 * release passes the lock to the next of them without a Redis call, each with the next token (every token issued
 * elsewhere afterwards is larger).
 */
export class LocalLines {
  private readonly lines = new Map<string, LocalLine>();

  constructor(
    private readonly notices: ReleaseNotices,
    /** Tokens a first waiter reserves beyond its own: how many times in a row a release may pass the lock on here. */
    private readonly maxLocalHandoffs: number,
    /** The client's record: whether an owner of this client holds the lock (a release under way does not count). */
    private readonly heldHere: (key: string) => boolean,
    /** Told of every release notice heard for a lock some waiter here listens to. */
    private readonly onReleaseHeard: (key: string) => void,
  ) {}

  /**
   * Waits in line behind this client's earlier waiters for the key; the first of them goes to Redis (`attempt`, with
   * tokens to reserve) and, when the lock is held elsewhere, sleeps until its release notice (at the latest until the
   * holder's lease runs out, and a recheck). A release here may pass the lock to a waiter directly.
   */
  async wait(key: string, budget: WaitBudget, attempt: RedisAttempt): Promise<StoreGrant<Tenure> | null> {
    const line = this.line(key);
    const me: LocalWaiter = { ticket: budget.ticket, grant: undefined, wake: () => {} };
    const at = line.waiters.findIndex((waiter) => waiter.ticket > me.ticket);
    line.waiters.splice(at < 0 ? line.waiters.length : at, 0, me);
    let won = false;
    try {
      for (;;) {
        if (me.grant) return ((won = true), me.grant);
        budget.signal?.throwIfAborted();
        let sleepMs = Math.min(budget.deadline - Date.now(), MAX_SLEEP_MS);
        if (!this.heldHere(key) && line.waiters[0] === me) {
          // Listening before the attempt: a release between the attempt and the sleep still wakes us.
          await this.notices.listen(this, redisKeys.releasedChannel(key), (from) => {
            if (from !== this.notices.instanceId) this.heard(key);
          });
          const heard = line.releases;
          const { grant, pttl } = await attempt(this.maxLocalHandoffs + 1);
          if (grant) return ((won = true), grant);
          if (me.grant || line.releases !== heard) continue;
          sleepMs = Math.min(budget.deadline - Date.now(), pttl > 0 ? pttl + 1 : 5, HEAD_RECHECK_MS);
        }
        if (sleepMs <= 0) return null;
        // Woken by a release notice, a hand-off, or the head of the line leaving.
        const sleep = sleepUntilWoken(sleepMs, budget.signal);
        me.wake = sleep.wake;
        try {
          await sleep.promise;
        } finally {
          me.wake = () => {};
        }
      }
    } finally {
      line.waiters.splice(line.waiters.indexOf(me), 1);
      // A winner holds the lock here (its hold is about to be recorded): the next waiter is woken by its release.
      if (!won || line.waiters.length === 0) this.wakeHead(key);
    }
  }

  /** Passes the lock to the next waiter here with the tenure's next token, if the hold has one and someone waits. */
  passOn(hold: Hold<Tenure>): boolean {
    const tenure = this.tokensLeft(hold);
    const next = tenure && this.lines.get(hold.key)?.waiters.find((waiter) => !waiter.grant);
    if (!tenure || !next) return false;
    const fence = tenure.nextFence++;
    next.grant = {
      fence,
      previousFence: fence - 1,
      leaseMs: tenure.leaseMs,
      requestedAt: tenure.confirmedAt,
      handle: tenure,
    };
    next.wake();
    return true;
  }

  /** The hold's tenure, if it still has reserved tokens to pass on locally (or give back on release). */
  tokensLeft(hold: Hold<Tenure>): Tenure | undefined {
    const tenure = hold.handle;
    return tenure && tenure.nextFence <= tenure.lastFence ? tenure : undefined;
  }

  /** The lock was freed in Redis (released or lost): the first waiter here goes to Redis, after `yieldMs`. */
  freed(key: string, yieldMs = 0): void {
    const line = this.lines.get(key);
    if (yieldMs > 0 && line && line.waiters.length > 0) setTimeout(() => this.wakeHead(key), yieldMs).unref();
    else this.wakeHead(key);
  }

  /** A release notice from another process: the first waiter tries at once. */
  private heard(key: string): void {
    this.onReleaseHeard(key);
    const line = this.lines.get(key);
    if (!line) return;
    line.releases++;
    this.wakeHead(key);
  }

  /** Wakes every waiter (the lock is closing: each finds out for itself). */
  wakeAll(): void {
    for (const line of this.lines.values()) for (const waiter of line.waiters) waiter.wake();
  }

  private line(key: string): LocalLine {
    let line = this.lines.get(key);
    if (!line) {
      line = { waiters: [], releases: 0 };
      this.lines.set(key, line);
    }
    return line;
  }

  /** The first local waiter takes over talking to Redis. */
  private wakeHead(key: string): void {
    const line = this.lines.get(key);
    if (line && line.waiters.length === 0) this.lines.delete(key);
    else if (line && !this.heldHere(key)) line.waiters[0]!.wake();
  }
}
