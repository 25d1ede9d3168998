import { sleepUntilWoken, type StoreGrant, type WaitBudget } from './hold.js';
import { redisKeys } from './keys.js';
import type { ReleaseNotices } from './release-notices.js';

/** Longest sleep of a waiter behind the first of its line, which a hand-off or the first's leaving cuts short. */
const MAX_SLEEP_MS = 1_000;
/** Longest sleep of the first waiter without a release notice: the holder may have died, or the notice was lost. */
export const HEAD_RECHECK_MS = 50;

/** One attempt at the store by the first waiter: a grant, or null and how long to sleep at most before the next. */
export type LineAttempt<H> = () => Promise<{ grant: StoreGrant<H> | null; retryMs?: number }>;

/** `grant`: set by a release that handed the lock over within this client. */
type Waiter<H> = { readonly ticket: number; grant: StoreGrant<H> | undefined; wake: () => void };
/** This client's waiters for one lock, by ticket, and the releases of it heard so far. */
type Line<H> = { readonly waiters: Waiter<H>[]; releases: number };

/**
 * How a lock client waits, on every backend without a queue of its own: its waiters line up per lock by ticket and only
 * the first talks to the store, so a process never races itself. The first sleeps until a release is heard (this
 * client's, or a notice from another process) or a recheck; a release here may hand the lock to the next directly.
 */
export class WaitingLines<H> {
  private readonly lines = new Map<string, Line<H>>();

  constructor(
    private readonly notices: ReleaseNotices | undefined,
    /** This client's id, which its own release notices carry: it hears of its releases without them. */
    private readonly clientId: string,
    /** Whether an owner of this client holds the lock: the first waiter then waits for its release, not the store. */
    private readonly heldHere: (key: string) => boolean,
    /** Told of every release notice heard for a lock some waiter here listens to. */
    private readonly onReleaseHeard: (key: string) => void,
  ) {}

  /** Waits in line for the key until granted, or null once `budget.deadline` passes. */
  async wait(key: string, budget: WaitBudget, attempt: LineAttempt<H>): Promise<StoreGrant<H> | null> {
    const line = this.lines.get(key) ?? { waiters: [], releases: 0 };
    this.lines.set(key, line);
    const me: Waiter<H> = { ticket: budget.ticket, grant: undefined, wake: () => {} };
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
          await this.notices?.listen(this, redisKeys.releasedChannel(key), (from) => {
            if (from !== this.clientId) this.heard(key);
          });
          const heard = line.releases;
          const { grant, retryMs = HEAD_RECHECK_MS } = await attempt();
          if (grant) return ((won = true), grant);
          if (me.grant || line.releases !== heard) continue;
          sleepMs = Math.min(budget.deadline - Date.now(), retryMs);
        }
        if (sleepMs <= 0) return null;
        const sleep = sleepUntilWoken(sleepMs, budget.signal);
        me.wake = sleep.wake;
        try {
          await sleep.promise;
        } catch (aborted) {
          // A release handed this waiter the lock before the abort reached it: keep it, or nobody holds it until expiry.
          if (!me.grant) throw aborted;
        } finally {
          me.wake = () => {};
        }
      }
    } finally {
      line.waiters.splice(line.waiters.indexOf(me), 1);
      // A winner holds the lock here (its hold is about to be recorded): the next waiter is woken by its release.
      if (!won || line.waiters.length === 0) this.wakeFirst(key);
    }
  }

  /** Hands the lock to the first waiter here that has no grant yet; false when nobody waits. */
  handOff(key: string, grant: () => StoreGrant<H>): boolean {
    const next = this.lines.get(key)?.waiters.find((waiter) => !waiter.grant);
    if (!next) return false;
    next.grant = grant();
    next.wake();
    return true;
  }

  /** This client let go of the lock (released or lost): the first waiter here tries, after `yieldMs`. */
  freed(key: string, yieldMs = 0): void {
    if (yieldMs > 0 && this.lines.has(key)) setTimeout(() => this.wakeFirst(key), yieldMs).unref();
    else this.wakeFirst(key);
  }

  /** Wakes every waiter (the client is closing: each finds out for itself). */
  wakeAll(): void {
    for (const line of this.lines.values()) for (const waiter of line.waiters) waiter.wake();
  }

  /** A release notice from another process: the first waiter tries at once. */
  private heard(key: string): void {
    this.onReleaseHeard(key);
    const line = this.lines.get(key);
    if (!line) return;
    line.releases++;
    this.wakeFirst(key);
  }

  private wakeFirst(key: string): void {
    const line = this.lines.get(key);
    if (line && line.waiters.length === 0) this.lines.delete(key);
    else if (line && !this.heldHere(key)) line.waiters[0]!.wake();
  }
}
