import { randomUUID } from 'node:crypto';
import { redisKeys } from './keys.js';
import type { NoticeSubscriber } from './notice-subscriber.js';

const IDLE_UNSUBSCRIBE_MS = 10_000;
/** How long the longest waiter sleeps without a notice before looking again (a holder may have died silently). */
const HEAD_RECHECK_MS = 50;
/** How long a segment found held by another instance is skipped without asking Redis again, unless a notice comes. */
const HELD_ELSEWHERE_MS = 20;

interface Waiter {
  /** When the caller first started waiting in this attempt: the queue is ordered by it. */
  since: number;
  /** Which releases the caller can use; a notice for another segment does not wake it. */
  accepts: ReadonlySet<string>;
  wake: (notice?: string) => void;
  timer: NodeJS.Timeout;
  timeoutMs: number;
  started: number;
}

/**
 * Parks callers until a segment of a SKU is released, first come first served within this process.
 *
 * A release wakes only the longest-waiting caller that can use the segment: only one of them can win the lock, so
 * waking all would multiply failed attempts. Releases by this process wake a local waiter at once, without the
 * round trip through Redis pub/sub; notices from other instances arrive by pub/sub. Only the longest waiter keeps a
 * short timer as a safety net for notices that never come (holder died, Redis restarted): the others wait their turn
 * instead of polling, which would let them overtake.
 */
export class UnlockWaiters {
  /** Identifies this process's own notices, which were already handled when it released. */
  readonly instanceId = randomUUID();
  private readonly queues = new Map<string, Waiter[]>();
  /** Counts releases; with `lastRelease` a caller can tell whether one it cares about happened while it looked. */
  private releaseCount = 0;
  private readonly lastRelease = new Map<string, Map<string, number>>();
  /** Segments another instance was found holding, until when to believe it: `<sku>\n<notice>` → epoch ms. */
  private readonly heldElsewhere = new Map<string, number>();
  private readonly listeners = new Map<string, { onNotice: (message: string) => void; lastUsed: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly subscriber: NoticeSubscriber) {
    // A hot SKU stays subscribed between bursts; a SKU nobody waited for in a while is dropped.
    this.sweeper = setInterval(() => this.unlistenIdle(Date.now() - IDLE_UNSUBSCRIBE_MS), IDLE_UNSUBSCRIBE_MS);
    this.sweeper.unref();
  }

  /** Starts listening before the caller's last attempt, so a release between that attempt and the wait is seen. */
  async prepare(sku: string): Promise<void> {
    const existing = this.listeners.get(sku);
    if (existing) {
      existing.lastUsed = Date.now();
      return;
    }
    const onNotice = (message: string) => {
      const separator = message.indexOf('|');
      if (message.slice(0, separator) !== this.instanceId) this.notify(sku, message.slice(separator + 1));
    };
    this.listeners.set(sku, { onNotice, lastUsed: Date.now() });
    await this.subscriber.listen(redisKeys.unlockChannel(sku), onNotice);
  }

  /** The payload of an unlock notice published by this process. */
  noticePayload(segmentNotice: string): string {
    return `${this.instanceId}|${segmentNotice}`;
  }

  /** True while callers of this process wait for the SKU: a newcomer queues behind them rather than overtaking. */
  hasWaiters(sku: string): boolean {
    return (this.queues.get(sku)?.length ?? 0) > 0;
  }

  /**
   * Remembers that another instance holds a segment, so this process's callers skip it without a round trip until
   * its unlock notice arrives (or briefly, if none does): sweeping held segments through Redis is what several
   * instances on one SKU would otherwise spend most of their lock calls on.
   */
  markHeldElsewhere(sku: string, segmentNotice: string): void {
    if (this.heldElsewhere.size > 100_000) this.heldElsewhere.clear();
    this.heldElsewhere.set(`${sku}\n${segmentNotice}`, Date.now() + HELD_ELSEWHERE_MS);
  }

  isHeldElsewhere(sku: string, segmentNotice: string): boolean {
    const key = `${sku}\n${segmentNotice}`;
    const until = this.heldElsewhere.get(key);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.heldElsewhere.delete(key);
    return false;
  }

  /** Taken before an attempt; passed to `wait` so that a release during the attempt is not slept through. */
  mark(): number {
    return this.releaseCount;
  }

  /**
   * Waits for a release of one of `accepts`, or at most `timeoutMs`; resolves with the notice that woke the caller,
   * which should try that segment first (it was woken for it; passing it by would leave it idle while others wait).
   * Returns at once if such a release happened after `mark`. `since` keeps a re-queued caller's place.
   */
  wait(
    sku: string,
    accepts: ReadonlySet<string>,
    options: { since: number; timeoutMs: number; mark: number },
  ): Promise<string | undefined> {
    const { since, timeoutMs, mark } = options;
    const releases = this.lastRelease.get(sku);
    if (releases) {
      for (const notice of accepts) {
        if ((releases.get(notice) ?? -1) >= mark) return Promise.resolve(notice);
      }
    }
    return new Promise((resolve) => {
      let queue = this.queues.get(sku);
      if (!queue) {
        queue = [];
        this.queues.set(sku, queue);
      }
      const waiter: Waiter = {
        since,
        accepts,
        timeoutMs,
        started: Date.now(),
        timer: undefined as unknown as NodeJS.Timeout,
        wake: (notice) => {
          clearTimeout(waiter.timer);
          this.remove(sku, waiter);
          resolve(notice);
        },
      };
      let index = queue.findIndex((w) => w.since > since);
      if (index < 0) index = queue.length;
      queue.splice(index, 0, waiter);
      this.arm(waiter, index === 0);
      if (index === 0 && queue.length > 1) this.arm(queue[1]!, false);
    });
  }

  /** A segment was released: the longest waiter that can use it tries next. */
  notify(sku: string, segmentNotice: string): void {
    let releases = this.lastRelease.get(sku);
    if (!releases) {
      releases = new Map();
      this.lastRelease.set(sku, releases);
    }
    releases.set(segmentNotice, this.releaseCount++);
    this.heldElsewhere.delete(`${sku}\n${segmentNotice}`);
    this.queues
      .get(sku)
      ?.find((w) => w.accepts.has(segmentNotice))
      ?.wake(segmentNotice);
  }

  /**
   * Wakes every waiter that can use `segmentNotice` (or every waiter of the SKU): for news that concerns them all,
   * e.g. the segment turned out empty, which no later release would ever tell them.
   */
  wakeAll(sku: string, segmentNotice?: string): void {
    for (const waiter of [...(this.queues.get(sku) ?? [])]) {
      if (segmentNotice === undefined || waiter.accepts.has(segmentNotice)) waiter.wake(segmentNotice);
    }
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const queue of this.queues.values()) for (const waiter of [...queue]) waiter.wake();
    this.unlistenIdle(Infinity);
  }

  private arm(waiter: Waiter, isHead: boolean): void {
    clearTimeout(waiter.timer);
    const left = Math.max(0, waiter.timeoutMs - (Date.now() - waiter.started));
    waiter.timer = setTimeout(() => waiter.wake(), isHead ? Math.min(left, HEAD_RECHECK_MS) : left);
  }

  private remove(sku: string, waiter: Waiter): void {
    const queue = this.queues.get(sku);
    if (!queue) return;
    const index = queue.indexOf(waiter);
    if (index < 0) return;
    queue.splice(index, 1);
    if (queue.length === 0) this.queues.delete(sku);
    else if (index === 0) this.arm(queue[0]!, true);
  }

  private unlistenIdle(idleSince: number): void {
    for (const [sku, listener] of this.listeners) {
      if (this.queues.has(sku) || listener.lastUsed > idleSince) continue;
      this.listeners.delete(sku);
      this.lastRelease.delete(sku);
      this.subscriber.unlisten(redisKeys.unlockChannel(sku), listener.onNotice);
    }
  }
}
