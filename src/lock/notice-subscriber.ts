import type { Redis } from 'ioredis';

type Handler = (message: string) => void;

/**
 * One subscriber connection per process, shared by everyone who listens to a channel. Subscriptions are counted so
 * a channel is unsubscribed once its last listener leaves; ioredis re-subscribes by itself after a reconnect.
 */
export class NoticeSubscriber {
  private readonly handlers = new Map<string, Set<Handler>>();
  private readonly pending = new Map<string, Promise<unknown>>();
  private readonly reconnectListeners = new Set<() => void>();

  constructor(private readonly connection: Redis) {
    connection.on('message', (channel: string, message: string) => {
      for (const handler of this.handlers.get(channel) ?? []) handler(message);
    });
    // Notices sent while the connection was down are lost: listeners must forget what they derived from them.
    connection.on('ready', () => {
      for (const listener of this.reconnectListeners) listener();
    });
  }

  /**
   * Resolves once the subscription is confirmed, so no notice published afterwards is missed. Fails at once while
   * Redis is unreachable, rather than queueing the subscription until it comes back (the caller answers 503).
   */
  async listen(channel: string, handler: Handler): Promise<void> {
    if (this.connection.status !== 'ready' && !this.handlers.has(channel)) {
      throw new Error(`Connection is closed: cannot subscribe to ${channel} while Redis is unreachable`);
    }
    let set = this.handlers.get(channel);
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
      this.pending.set(channel, this.connection.subscribe(channel));
    }
    set.add(handler);
    await this.pending.get(channel);
  }

  unlisten(channel: string, handler: Handler): void {
    const set = this.handlers.get(channel);
    if (!set) return;
    set.delete(handler);
    if (set.size === 0) {
      this.handlers.delete(channel);
      this.pending.delete(channel);
      this.connection.unsubscribe(channel).catch(() => {});
    }
  }

  onReconnect(listener: () => void): void {
    this.reconnectListeners.add(listener);
  }
}
