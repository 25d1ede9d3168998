import { randomUUID } from 'node:crypto';
import type { RedisClient } from '../redis/connections.js';
import { redisKeys } from './keys.js';

/** How long a caller waits for a subscription to be confirmed before it goes on without (a Redis that is down). */
const SUBSCRIBE_WAIT_MS = 250;
/** Locks nobody waited for in this long are unsubscribed. */
const IDLE_UNSUBSCRIBE_MS = 10_000;
/** How long the longest waiter of a group sleeps without a notice before looking again (a holder may have died). */
const HEAD_RECHECK_MS = 50;
/**
 * How long any other waiter sleeps without a notice before looking again. Not needed when every release wakes the
 * waiter it should; it bounds what a wake-up lost to a bug would cost (one recheck, not the caller's whole wait
 * budget). Long enough never to compete with the head's rechecks.
 */
const BEHIND_RECHECK_MS = 1_000;
/** How long a lock found held by another process is skipped without asking again, unless its release notice comes. */
const HELD_ELSEWHERE_MS = 20;

interface Waiter {
  /** The caller's place in line, from `ticket()` when it first started waiting: the group's queue is ordered by it. */
  ticket: number;
  /** The locks whose release the caller can use; another lock's release does not wake it. */
  accepts: ReadonlySet<string>;
  wake: (name?: string) => void;
  timer: NodeJS.Timeout | undefined;
  deadline: number;
}

/**
 * Release notices and the callers waiting for them: the one place a process waits for a lock to be freed.
 *
 * Each lock has a release channel (keys.ts), a shard channel in its lock's slot; a process subscribes (SSUBSCRIBE) to
 * the locks its callers wait for, on one subscriber connection (on a cluster, one per primary). Waiters line up per group (a SKU, or a single lock), first come first served, and may wait
 * for any of several locks. A release wakes only the longest waiter that can use it: only one of them can win the
 * lock, so waking all would multiply failed attempts. Releases by this process wake a local waiter at once, without
 * the round trip through Redis; its own notices are then ignored. Only the longest waiter of a group keeps a short
 * timer, the safety net for notices that never come (the holder died, Redis restarted); the others wait their turn
 * instead of polling, which would let them overtake, and look again only after a second.
 *
 * Notices only shorten waits: every wait is bounded, so a lost notice or an unconfirmed subscription costs a recheck,
 * never a stuck caller.
 */
export class ReleaseNotices {
  /** The payload of this process's notices, so it can tell them from others'. */
  readonly instanceId = randomUUID();
  private readonly queues = new Map<string, Waiter[]>();
  /** Lock name → the group its waiters line up in, for every lock subscribed to. */
  private readonly groupOf = new Map<string, string>();
  private readonly subscriptions = new Map<
    string,
    { confirmed: Promise<void>; handler: (message: string) => void; lastUsed: number; name?: string }
  >();
  /** Counts releases; with `lastRelease` a caller can tell whether one it cares about happened while it looked. */
  private releaseCount = 0;
  private tickets = 0;
  private readonly lastRelease = new Map<string, number>();
  /** Locks a caller of this process holds or is taking: asking the store about them would only hear "held". */
  private readonly heldHere = new Set<string>();
  /** Locks another process was found holding, and until when to believe it (epoch ms). */
  private readonly heldElsewhere = new Map<string, number>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly subscriber: RedisClient) {
    subscriber.on('smessage', (channel: string, message: string) => this.subscriptions.get(channel)?.handler(message));
    // A hot lock stays subscribed between bursts; one nobody waited for in a while is dropped.
    this.sweeper = setInterval(() => this.unsubscribeIdle(Date.now() - IDLE_UNSUBSCRIBE_MS), IDLE_UNSUBSCRIBE_MS);
    this.sweeper.unref();
  }

  /**
   * Subscribes to the release notices of `names`, whose waiters line up in `group`. Call it before the attempt that
   * may lead to a wait, so that a release between the attempt and the wait is seen.
   */
  async listen(group: string, names: readonly string[]): Promise<void> {
    const now = Date.now();
    const pending: Promise<void>[] = [];
    for (const name of names) {
      this.groupOf.set(name, group);
      const channel = redisKeys.releasedChannel(name);
      const known = this.subscriptions.get(channel);
      if (known) {
        known.lastUsed = now;
        continue;
      }
      const handler = (message: string) => {
        if (message !== this.instanceId) this.notify(name);
      };
      pending.push(this.subscribe(channel, handler, name));
    }
    if (pending.length > 0) await this.boundedWait(Promise.all(pending));
  }

  /** Subscribes `handler` to a channel of its own (fair mode's hand-off notices), waiting a little for confirmation. */
  async listenTo(channel: string, handler: (message: string) => void): Promise<void> {
    const known = this.subscriptions.get(channel);
    if (known) known.lastUsed = Date.now();
    await this.boundedWait(known ? known.confirmed : this.subscribe(channel, handler));
  }

  /** A caller's place in line, taken when it arrives: strictly increasing, so arrival order is kept to the end. */
  ticket(): number {
    return this.tickets++;
  }

  /** Taken before an attempt; passed to `wait` so that a release during the attempt is not slept through. */
  mark(): number {
    return this.releaseCount;
  }

  /**
   * Waits for a release of one of `accepts`, or until `deadline`; resolves with the lock whose release woke the
   * caller, which it should try first (passing it by would leave it idle while others wait). Returns at once if such
   * a release happened after `mark`. `ticket` keeps a re-queued caller's place; `signal` ends the wait early.
   */
  wait(
    group: string,
    accepts: ReadonlySet<string>,
    options: { ticket: number; deadline: number; mark: number; signal?: AbortSignal | undefined },
  ): Promise<string | undefined> {
    for (const name of accepts) {
      if ((this.lastRelease.get(name) ?? -1) >= options.mark) return Promise.resolve(name);
    }
    return new Promise((resolve) => {
      let queue = this.queues.get(group);
      if (!queue) {
        queue = [];
        this.queues.set(group, queue);
      }
      const waiter: Waiter = {
        ticket: options.ticket,
        accepts,
        deadline: options.deadline,
        timer: undefined,
        wake: (name) => {
          clearTimeout(waiter.timer);
          options.signal?.removeEventListener('abort', onAbort);
          this.remove(group, waiter);
          resolve(name);
        },
      };
      const onAbort = () => waiter.wake();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      let index = queue.findIndex((w) => w.ticket > waiter.ticket);
      if (index < 0) index = queue.length;
      queue.splice(index, 0, waiter);
      this.arm(waiter, index === 0);
      if (index === 0 && queue.length > 1) this.arm(queue[1]!, false);
    });
  }

  /**
   * A lock was released (by this process, or a notice said so): the longest waiter that can use it tries next. A
   * release by this process clears its held-here mark first, so the waiter it wakes may take the lock at once.
   */
  notify(name: string): void {
    this.heldHere.delete(name);
    this.heldElsewhere.delete(name);
    const group = this.groupOf.get(name);
    if (group === undefined) return;
    this.lastRelease.set(name, this.releaseCount++);
    this.passOn(group, name);
  }

  /** A caller of this process waits for `name`'s release: its holder should let it go, not take it again. */
  isWaitedFor(name: string): boolean {
    const group = this.groupOf.get(name);
    return group !== undefined && (this.queues.get(group)?.some((w) => w.accepts.has(name)) ?? false);
  }

  /** Wakes the longest waiter that can use `name`, for a release that the caller it woke will not use. */
  passOn(group: string, name: string): void {
    this.queues
      .get(group)
      ?.find((w) => w.accepts.has(name))
      ?.wake(name);
  }

  /**
   * Wakes every waiter of the group that can use `name` (or every waiter of the group): for news that concerns
   * them all, e.g. a segment turned out empty, which no later release would ever tell them.
   */
  wakeAll(group: string, name?: string): void {
    for (const waiter of [...(this.queues.get(group) ?? [])]) {
      if (name === undefined || waiter.accepts.has(name)) waiter.wake(name);
    }
  }

  /** True while callers of this process wait in the group: a newcomer lines up behind them rather than overtaking. */
  hasWaiters(group: string): boolean {
    return (this.queues.get(group)?.length ?? 0) > 0;
  }

  /** Marks the lock as held (or being taken) by a caller of this process; false if it already is. */
  markHeldHere(name: string): boolean {
    if (this.heldHere.has(name)) return false;
    this.heldHere.add(name);
    return true;
  }

  /** Drops the mark without waking anyone: the attempt failed, nobody waits for this. */
  clearHeldHere(name: string): void {
    this.heldHere.delete(name);
  }

  isHeldHere(name: string): boolean {
    return this.heldHere.has(name);
  }

  /**
   * Remembers that another process holds the lock, so this process's callers skip it without a round trip until its
   * release notice arrives (or briefly, if none does): sweeping held locks through the store is what several
   * processes on one hot SKU would otherwise spend most of their lock calls on. `mark` is taken before the attempt
   * that found it held: if a release was heard since, the answer is already stale and is not remembered (a waiter
   * trusting it would sleep through the lock being free, with no release left to wake it).
   */
  markHeldElsewhere(name: string, mark: number): void {
    if ((this.lastRelease.get(name) ?? -1) >= mark) return;
    if (this.heldElsewhere.size > 100_000) this.heldElsewhere.clear();
    this.heldElsewhere.set(name, Date.now() + HELD_ELSEWHERE_MS);
  }

  isHeldElsewhere(name: string): boolean {
    const until = this.heldElsewhere.get(name);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.heldElsewhere.delete(name);
    return false;
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const queue of this.queues.values()) for (const waiter of [...queue]) waiter.wake();
  }

  private subscribe(channel: string, handler: (message: string) => void, name?: string): Promise<void> {
    const confirmed = this.subscriber.ssubscribe(channel).then(() => undefined);
    this.subscriptions.set(channel, { confirmed, handler, lastUsed: Date.now(), name });
    // A subscription that failed is made again by the next caller.
    confirmed.catch(() => {
      if (this.subscriptions.get(channel)?.confirmed === confirmed) this.subscriptions.delete(channel);
    });
    return confirmed;
  }

  /** Waits for subscriptions at most briefly: a Redis that is away must not hold callers up here. */
  private async boundedWait(confirmed: Promise<unknown>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const giveUp = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, SUBSCRIBE_WAIT_MS);
    });
    await Promise.race([confirmed.catch(() => {}), giveUp]);
    clearTimeout(timer);
  }

  private arm(waiter: Waiter, isHead: boolean): void {
    clearTimeout(waiter.timer);
    const left = Math.max(0, waiter.deadline - Date.now());
    waiter.timer = setTimeout(() => waiter.wake(), Math.min(left, isHead ? HEAD_RECHECK_MS : BEHIND_RECHECK_MS));
  }

  private remove(group: string, waiter: Waiter): void {
    const queue = this.queues.get(group);
    const index = queue?.indexOf(waiter) ?? -1;
    if (!queue || index < 0) return;
    queue.splice(index, 1);
    if (queue.length === 0) this.queues.delete(group);
    else if (index === 0) this.arm(queue[0]!, true);
  }

  private unsubscribeIdle(idleSince: number): void {
    for (const [channel, subscription] of this.subscriptions) {
      const group = subscription.name === undefined ? undefined : this.groupOf.get(subscription.name);
      if (subscription.lastUsed > idleSince || (group !== undefined && this.queues.has(group))) continue;
      this.subscriptions.delete(channel);
      this.subscriber.sunsubscribe(channel).catch(() => {});
    }
    for (const [name, group] of this.groupOf) {
      if (this.subscriptions.has(redisKeys.releasedChannel(name)) || this.queues.has(group)) continue;
      this.groupOf.delete(name);
      this.lastRelease.delete(name);
    }
  }
}
