import type { RedisClient } from '../redis/connections.js';
import { redisKeys } from './keys.js';

/** How long a caller waits for a subscription to be confirmed before it goes on without (a Redis that is down). */
const SUBSCRIBE_WAIT_MS = 250;
/** Channels nobody listened to in this long are unsubscribed. */
const IDLE_UNSUBSCRIBE_MS = 10_000;

/** `handlers`: one per listener (a lock client's waiting lines, its fair queue), the latest it gave. */
type Subscription = { confirmed: Promise<void>; handlers: Map<object, (message: string) => void>; lastUsed: number };

/**
 * The locks' notices on the service's Redis, whatever the backend: each lock's release and fair hand-off notices come
 * on shard channels of their own (keys.ts), subscribed to on one connection per process while a waiter listens. The
 * Redis lock's scripts publish their own; the other clients publish theirs here after each release, so a waiter in
 * another process wakes on every backend. Notices only shorten waits: a lost one costs a recheck.
 */
export class ReleaseNotices {
  private readonly subscriptions = new Map<string, Subscription>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly subscriber: RedisClient,
    /** A connection to publish on (a subscribed one can do nothing else); without it, `publish` does nothing. */
    private readonly publisher?: RedisClient,
  ) {
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

  /** Announces the release of `key` by `releaser` (a lock client's id, so its own waiters can ignore it). */
  publish(key: string, releaser: string): void {
    this.publisher?.spublish(redisKeys.releasedChannel(key), releaser).catch(() => 0);
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
