import { type Hold, sleepUntilWoken, type StoreGrant, type WaitBudget } from '../hold.js';
import type { ReleaseNotices } from '../release-notices.js';

/** Longest sleep of a non-fair waiter when no notice comes and the holder's lease is long. */
const MAX_SLEEP_MS = 1_000;

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
export type RedisAttempt = (reserve: number) => Promise<{ grant: StoreGrant<string> | null; pttl: number }>;

/** A waiter of this client for one lock, in non-fair mode. */
interface LocalWaiter {
  readonly owner: string;
  /** Set by a release that passed the lock on within this client. */
  grant: StoreGrant<string> | undefined;
  wake: () => void;
}

/** This client's view of one lock: which of its owners holds it, on what tenure, and who of its own waits behind. */
class LocalLine {
  holder: string | undefined;
  tenure: Tenure | undefined;
  readonly waiters: LocalWaiter[] = [];

  get idle(): boolean {
    return this.holder === undefined && this.waiters.length === 0;
  }
}

/**
 * The Redis lock's non-fair mode (lock cohorting): the waiters of one client for a lock line up here, and only the
 * first talks to Redis, woken by the lock's release notice. A holder that took the lock from Redis reserved a block
 * of fencing tokens with it (its tenure); while its process has waiters and tokens remain, a release passes the lock
 * to the next of them without a Redis call, each with the next token (every token issued elsewhere afterwards is
 * larger). Which owner of this client holds each lock is kept here too, for fair holds as well, so that an attempt
 * at a lock held here never goes to Redis only to be told so.
 */
export class LocalLines {
  private readonly lines = new Map<string, LocalLine>();

  constructor(
    private readonly notices: ReleaseNotices,
    /** Tokens a first waiter reserves beyond its own: how many times in a row a release may pass the lock on here. */
    private readonly maxLocalHandoffs: number,
  ) {}

  /** Another owner of this client holds the lock. */
  isHeld(key: string): boolean {
    return this.lines.get(key)?.holder !== undefined;
  }

  /** Some owner of this client waits for the lock here. */
  isWaitedFor(key: string): boolean {
    return (this.lines.get(key)?.waiters.length ?? 0) > 0;
  }

  /**
   * A new hold taken from Redis: this client holds the lock, with tokens `fence`..`lastFence` to pass on locally.
   * `previous`: the token issued before `fence`, 0 for none remembered.
   */
  startTenure(
    key: string,
    owner: string,
    ttlMs: number,
    requestedAt: number,
    [fence, previous, lastFence]: [number, number, number],
  ): StoreGrant<string> {
    const line = this.line(key);
    line.holder = owner;
    line.tenure = { redisOwner: owner, nextFence: fence + 1, lastFence, leaseMs: ttlMs, confirmedAt: requestedAt };
    return { fence, previousFence: previous, leaseMs: ttlMs, requestedAt, handle: owner };
  }

  /** A fair grant: this client holds the lock under the waiter's own id, without reserved tokens. */
  holdWithoutTenure(key: string, owner: string): void {
    const line = this.line(key);
    line.holder = owner;
    line.tenure = undefined;
  }

  /**
   * Waits in line behind this client's other waiters for the key; the first of them goes to Redis (`attempt`, with
   * tokens to reserve) and, when the lock is held elsewhere, waits for its release notice (at the latest until the
   * holder's lease runs out). A release here may pass the lock to a waiter directly.
   */
  async wait(
    key: string,
    owner: string,
    budget: WaitBudget,
    attempt: RedisAttempt,
  ): Promise<StoreGrant<string> | null> {
    const line = this.line(key);
    const me: LocalWaiter = { owner, grant: undefined, wake: () => {} };
    line.waiters.push(me);
    const ticket = this.notices.ticket();
    try {
      for (;;) {
        if (me.grant) return me.grant;
        budget.signal?.throwIfAborted();
        const remaining = budget.deadline - Date.now();
        if (line.holder === undefined && line.waiters[0] === me) {
          // Listening before the attempt: a release between the attempt and the wait still wakes us.
          await this.notices.listen(key, [key]);
          const mark = this.notices.mark();
          const { grant, pttl } = await attempt(this.maxLocalHandoffs + 1);
          if (grant) return grant;
          if (me.grant) continue;
          if (Date.now() >= budget.deadline) return null;
          const until = Date.now() + Math.min(budget.deadline - Date.now(), pttl > 0 ? pttl + 1 : 5, MAX_SLEEP_MS);
          await this.notices.wait(key, new Set([key]), { ticket, deadline: until, mark, signal: budget.signal });
          continue;
        }
        if (remaining <= 0) return null;
        // Behind another waiter of this client, or the lock is held here: woken by a hand-off or the head leaving.
        const sleep = sleepUntilWoken(Math.min(remaining, MAX_SLEEP_MS), budget.signal);
        me.wake = sleep.wake;
        try {
          await sleep.promise;
        } finally {
          me.wake = () => {};
        }
      }
    } finally {
      line.waiters.splice(line.waiters.indexOf(me), 1);
      this.wakeHead(key, line);
    }
  }

  /** Passes the lock to the next waiter here with the tenure's next token, if the hold has one and someone waits. */
  passOn(hold: Hold<string>): boolean {
    const spare = this.tokensLeft(hold);
    const line = this.lines.get(hold.key);
    const next = spare && line!.waiters.find((w) => !w.grant);
    if (!spare || !next) return false;
    line!.holder = next.owner;
    const fence = spare.nextFence++;
    next.grant = {
      fence,
      previousFence: fence - 1,
      leaseMs: spare.leaseMs,
      requestedAt: spare.confirmedAt,
      handle: spare.redisOwner,
    };
    next.wake();
    return true;
  }

  /** The hold's own tenure, if it still has reserved tokens to pass on locally (or give back on release). */
  tokensLeft(hold: Hold<string>): Tenure | undefined {
    const line = this.lines.get(hold.key);
    const tenure = line?.tenure;
    const own = !!tenure && line!.holder === hold.owner && tenure.redisOwner === hold.handle;
    return own && tenure.nextFence <= tenure.lastFence ? tenure : undefined;
  }

  /** Redis confirmed the hold's lease at `requestedAt`: holds passed on from its tenure are valid that much longer. */
  confirmed(hold: Hold<string>, requestedAt: number): void {
    const tenure = this.lines.get(hold.key)?.tenure;
    if (tenure && tenure.redisOwner === hold.handle) tenure.confirmedAt = requestedAt;
  }

  /** The hold ended in Redis (released or lost): the next local waiter goes to Redis, after `yieldMs`. */
  forgetHolder(hold: Hold<string>, yieldMs = 0): void {
    const line = this.lines.get(hold.key);
    if (!line || line.holder !== hold.owner) return;
    line.holder = undefined;
    if (line.tenure?.redisOwner === hold.handle) line.tenure = undefined;
    if (yieldMs > 0 && line.waiters.length > 0) setTimeout(() => this.wakeHead(hold.key, line), yieldMs).unref();
    else this.wakeHead(hold.key, line);
  }

  /** Wakes every waiter (the lock is closing: each finds out for itself). */
  wakeAll(): void {
    for (const line of this.lines.values()) for (const waiter of line.waiters) waiter.wake();
  }

  private line(key: string): LocalLine {
    let line = this.lines.get(key);
    if (!line) {
      line = new LocalLine();
      this.lines.set(key, line);
    }
    return line;
  }

  /** The first local waiter takes over talking to Redis. */
  private wakeHead(key: string, line: LocalLine): void {
    if (line.idle) {
      if (this.lines.get(key) === line) this.lines.delete(key);
      return;
    }
    if (line.holder === undefined) line.waiters[0]?.wake();
  }
}
