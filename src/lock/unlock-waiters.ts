import { redisKeys } from './keys.js';
import type { NoticeSubscriber } from './notice-subscriber.js';

const IDLE_UNSUBSCRIBE_MS = 10_000;

interface Waiter {
  /** Layout version and segments the waiter can use; a notice for another segment does not wake it. */
  accepts: (notice: string) => boolean;
  wake: () => void;
}

/**
 * Parks callers until a segment of a SKU is released. Each notice wakes only the longest-waiting local caller
 * that can use that segment: only one of them can win the lock, so waking all would just multiply failed attempts.
 * A timer bounds every wait, covering a notice that never comes (holder died, Redis restarted).
 */
export class UnlockWaiters {
  private readonly queues = new Map<string, Waiter[]>();
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
    const onNotice = (message: string) => this.dispatch(sku, message);
    this.listeners.set(sku, { onNotice, lastUsed: Date.now() });
    await this.subscriber.listen(redisKeys.unlockChannel(sku), onNotice);
  }

  close(): void {
    clearInterval(this.sweeper);
    this.unlistenIdle(Infinity);
  }

  wait(sku: string, segmentNotices: ReadonlySet<string>, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const queue = this.queues.get(sku) ?? [];
      this.queues.set(sku, queue);
      const done = () => {
        clearTimeout(timer);
        const index = queue.indexOf(waiter);
        if (index >= 0) queue.splice(index, 1);
        if (queue.length === 0 && this.queues.get(sku) === queue) this.queues.delete(sku);
        resolve();
      };
      const waiter: Waiter = { accepts: (notice) => segmentNotices.has(notice), wake: done };
      const timer = setTimeout(done, timeoutMs);
      queue.push(waiter);
    });
  }

  private dispatch(sku: string, notice: string): void {
    const waiter = this.queues.get(sku)?.find((w) => w.accepts(notice));
    waiter?.wake();
  }

  private unlistenIdle(idleSince: number): void {
    for (const [sku, listener] of this.listeners) {
      if (this.queues.has(sku) || listener.lastUsed > idleSince) continue;
      this.listeners.delete(sku);
      this.subscriber.unlisten(redisKeys.unlockChannel(sku), listener.onNotice);
    }
  }
}
