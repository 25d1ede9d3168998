import { randomUUID } from 'node:crypto';
import type { RedisClient } from '../redis/connections.js';

/** How long a caller waits for a subscription to be confirmed before it goes on without (a Redis that is down). */
const SUBSCRIBE_WAIT_MS = 250;
/** Channels nobody listened to in this long are unsubscribed. */
const IDLE_UNSUBSCRIBE_MS = 10_000;

interface Subscription {
  readonly confirmed: Promise<void>;
  /** One handler per listener (a lock client's waiting lines, its fair queue): the latest it gave. */
  readonly handlers: Map<object, (message: string) => void>;
  lastUsed: number;
}

/**
 * The Redis lock's notices, on one subscriber connection per process (on a cluster, one per primary): each lock's
 * release notice and fair hand-off notice come on shard channels of their own (keys.ts), subscribed to (SSUBSCRIBE)
 * while some waiter of this process listens. Notices only shorten waits: every wait is bounded, so a lost notice or an
 * unconfirmed subscription costs a recheck, never a stuck caller.
 */
export class ReleaseNotices {
  /** The payload of this process's release notices, so it can tell them from others'. */
  readonly instanceId = randomUUID();
  private readonly subscriptions = new Map<string, Subscription>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly subscriber: RedisClient) {
    subscriber.on('smessage', (channel: string, message: string) => {
      for (const handler of this.subscriptions.get(channel)?.handlers.values() ?? []) handler(message);
    });
    // A hot lock stays subscribed between bursts; one nobody listened to in a while is dropped.
    this.sweeper = setInterval(() => this.unsubscribeIdle(Date.now() - IDLE_UNSUBSCRIBE_MS), IDLE_UNSUBSCRIBE_MS);
    this.sweeper.unref();
  }

  /**
   * Subscribes `listener`'s `handler` to the channel, and waits a little for the subscription to be confirmed. Call it
   * before the attempt that may lead to a wait, so that a notice between the attempt and the wait is heard.
   */
  async listen(listener: object, channel: string, handler: (message: string) => void): Promise<void> {
    let subscription = this.subscriptions.get(channel);
    if (!subscription) {
      const confirmed = this.subscriber.ssubscribe(channel).then(() => undefined);
      subscription = { confirmed, handlers: new Map(), lastUsed: 0 };
      this.subscriptions.set(channel, subscription);
      // A subscription that failed is made again by the next caller.
      confirmed.catch(() => {
        if (this.subscriptions.get(channel)?.confirmed === confirmed) this.subscriptions.delete(channel);
      });
    }
    subscription.handlers.set(listener, handler);
    subscription.lastUsed = Date.now();
    // At most briefly: a Redis that is away must not hold callers up here.
    let timer: NodeJS.Timeout | undefined;
    const giveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, SUBSCRIBE_WAIT_MS)));
    await Promise.race([subscription.confirmed.catch(() => {}), giveUp]);
    clearTimeout(timer);
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  private unsubscribeIdle(idleSince: number): void {
    for (const [channel, subscription] of this.subscriptions) {
      if (subscription.lastUsed > idleSince) continue;
      this.subscriptions.delete(channel);
      this.subscriber.sunsubscribe(channel).catch(() => {});
    }
  }
}
