import type { Redis } from 'ioredis';
import { sleepUntilWoken } from '../lock-client.js';

interface ReleaseWaiter {
  message: string;
  wake: () => void;
}

export interface Handoff {
  fence: number;
  leaseMs: number;
  receivedAt: number;
}

/** A queued waiter's mailbox: a hand-off may arrive while the waiter is between two polls, so it is kept. */
export class HandoffSlot {
  handoff: Handoff | undefined;
  private wake: (() => void) | undefined;

  deliver(handoff: Handoff): void {
    this.handoff ??= handoff;
    this.wake?.();
  }

  async wait(ms: number, signal?: AbortSignal): Promise<Handoff | undefined> {
    if (this.handoff) return this.handoff;
    const sleep = sleepUntilWoken(ms, signal);
    this.wake = sleep.wake;
    try {
      await sleep.promise;
    } finally {
      this.wake = undefined;
    }
    return this.handoff;
  }
}

/** How long a waiter waits for its subscription before it goes on without (a Redis that is down, a slow start). */
const SUBSCRIBE_WAIT_MS = 250;

/**
 * Release and hand-off notices for one process, over one subscriber connection of its own. A release notice wakes only
 * the longest-waiting local waiter for that lock (only one can win it); a hand-off notice goes to the waiter it names.
 * Channels stay subscribed for the client's life; ioredis re-subscribes after a reconnect. Notices only shorten waits:
 * every wait is bounded, so a notice lost, or a subscription not yet confirmed, costs a poll interval, never a stuck
 * waiter.
 */
export class RedisLockNotices {
  private readonly handlers = new Map<string, (message: string) => void>();
  private readonly subscribed = new Map<string, Promise<void>>();
  private readonly releaseWaiters = new Map<string, ReleaseWaiter[]>();
  private readonly slots = new Map<string, HandoffSlot>();

  constructor(readonly connection: Redis) {
    connection.on('error', () => {});
    connection.on('message', (channel: string, message: string) => this.handlers.get(channel)?.(message));
  }

  /**
   * Subscribes, waiting a little for the confirmation: attempts made after it cannot miss the notice of a release
   * that follows them.
   */
  listenForReleases(channel: string): Promise<void> {
    return this.subscribe(channel, (message) =>
      this.releaseWaiters
        .get(channel)
        ?.find((w) => w.message === message)
        ?.wake(),
    );
  }

  listenForHandoffs(channel: string): Promise<void> {
    return this.subscribe(channel, (message) => {
      const [waiter, fence, leaseMs, ...name] = message.split('\n');
      this.deliverHandoff(waiter!, name.join('\n'), Number(fence), Number(leaseMs));
    });
  }

  /** Calls `wake` on the next notice for this lock meant for this waiter; returns the unsubscribe. */
  onRelease(notice: { channel: string; message: string }, wake: () => void): () => void {
    const queue = this.releaseWaiters.get(notice.channel) ?? [];
    this.releaseWaiters.set(notice.channel, queue);
    const waiter = { message: notice.message, wake };
    queue.push(waiter);
    return () => {
      const index = queue.indexOf(waiter);
      if (index >= 0) queue.splice(index, 1);
      if (queue.length === 0 && this.releaseWaiters.get(notice.channel) === queue)
        this.releaseWaiters.delete(notice.channel);
    };
  }

  openSlot(owner: string, name: string): HandoffSlot {
    const slot = new HandoffSlot();
    this.slots.set(slotId(owner, name), slot);
    return slot;
  }

  closeSlot(owner: string, name: string, slot: HandoffSlot): void {
    if (this.slots.get(slotId(owner, name)) === slot) this.slots.delete(slotId(owner, name));
  }

  /** From a notice, or straight from the reply of a local release that handed the lock on. */
  deliverHandoff(owner: string, name: string, fence: number, leaseMs: number): void {
    this.slots.get(slotId(owner, name))?.deliver({ fence, leaseMs, receivedAt: Date.now() });
  }

  close(): void {
    this.connection.disconnect();
  }

  private async subscribe(channel: string, handler: (message: string) => void): Promise<void> {
    let subscribed = this.subscribed.get(channel);
    if (!subscribed) {
      this.handlers.set(channel, handler);
      subscribed = this.connection.subscribe(channel).then(() => undefined);
      // A failed subscription is tried again by the next waiter.
      subscribed.catch(() => {
        if (this.subscribed.get(channel) === subscribed) this.subscribed.delete(channel);
      });
      this.subscribed.set(channel, subscribed);
    }
    const sleep = sleepUntilWoken(SUBSCRIBE_WAIT_MS);
    await Promise.race([subscribed.catch(() => {}), sleep.promise]);
    sleep.wake();
  }
}

const slotId = (owner: string, name: string) => `${owner}\n${name}`;
