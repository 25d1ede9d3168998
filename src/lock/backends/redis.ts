import type { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import { Hold, LockClient, type LockClientOptions, type StoreGrant, type StoreRelease, type WaitBudget } from '../lock-client.js';
import { ensureLockCommands, LockScriptCode } from './redis-commands.js';
import { namedLockKeyspace, type RedisLockKeyspace } from './redis-keyspace.js';
import { RedisLockNotices } from './redis-notices.js';

export interface RedisLockOptions extends LockClientOptions {
  /** Connection for the lock scripts. */
  redis: Redis;
  /** Connection for release notices; default: a duplicate of `redis`, opened on the first wait. */
  subscriber?: Redis;
  keyspace?: RedisLockKeyspace;
  /** Quit `redis` on close() (a connection made for this lock); a shared one is left open. */
  ownsConnection?: boolean;
  /** How long a queued waiter keeps its place without polling (default 3 s): a dead process's place lapses. */
  waiterLeaseMs?: number;
}

/** Longest sleep between attempts of a non-fair waiter when no notice comes (a holder that died publishes none). */
const MAX_SLEEP_MS = 1_000;

/**
 * The single-Redis lock: a hash {owner, count, fence} per lock (reentrant, Redisson style), taken and released by Lua,
 * waiters woken by release notices. Fair mode adds a FIFO queue beside the hash: the release script hands the lock
 * straight to the queue's head and tells it, so no waiter is overtaken and a hand-off costs no extra round trip.
 */
export class RedisLock extends LockClient {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, releaseNotices: true };
  readonly keyspace: RedisLockKeyspace;
  private readonly redis: Redis;
  private readonly waiterLeaseMs: number;
  private notices: RedisLockNotices | undefined;

  constructor(private readonly options: RedisLockOptions) {
    super(options);
    this.redis = options.redis;
    ensureLockCommands(this.redis);
    this.keyspace = options.keyspace ?? namedLockKeyspace();
    this.waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
  }

  /** Never overtakes a queued waiter, fair or not: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const requestedAt = Date.now();
    const [fence] = await this.callAcquire(key, owner, ttlMs, 'try');
    return fence > 0 ? { fence, leaseMs: ttlMs, requestedAt } : null;
  }

  protected async waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    return budget.fair ? this.waitInLine(key, owner, ttlMs, budget) : this.waitForRelease(key, owner, ttlMs, budget);
  }

  private async waitForRelease(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    const notices = this.noticeBoard();
    const { channel, message } = this.keyspace.releaseNotice(key);
    await notices.listenForReleases(channel);
    for (;;) {
      budget.signal?.throwIfAborted();
      const requestedAt = Date.now();
      const [fence, pttl] = await this.callAcquire(key, owner, ttlMs, 'try');
      if (fence > 0) return { fence, leaseMs: ttlMs, requestedAt };
      const remaining = budget.deadline - Date.now();
      if (remaining <= 0) return null;
      // Woken by the release notice; at the latest when the holder's lease would run out.
      const untilExpiry = pttl > 0 ? pttl + 1 : 5;
      await notices.waitForRelease(channel, message, Math.min(remaining, untilExpiry, MAX_SLEEP_MS), budget.signal);
    }
  }

  private async waitInLine(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    const notices = this.noticeBoard();
    await notices.listenForHandoffs(this.keyspace.grantChannel);
    const slot = notices.openSlot(owner, key);
    try {
      let mode: 'queue' | 'poll' = 'queue';
      for (;;) {
        const requestedAt = Date.now();
        const [fence] = await this.callAcquire(key, owner, ttlMs, mode);
        mode = 'poll';
        if (fence > 0) return { fence, leaseMs: ttlMs, requestedAt };
        const remaining = budget.deadline - Date.now();
        if (remaining <= 0 && !slot.handoff) {
          await this.leaveLine(key, owner);
          return null;
        }
        let handoff;
        try {
          handoff = await slot.wait(Math.min(remaining, this.waiterLeaseMs / 3), budget.signal);
        } catch (aborted) {
          await this.leaveLine(key, owner);
          throw aborted;
        }
        if (handoff) return { fence: handoff.fence, leaseMs: handoff.leaseMs, requestedAt: handoff.receivedAt };
      }
    } finally {
      notices.closeSlot(owner, key, slot);
    }
  }

  /** Leaves the queue; a hand-off that raced with giving up is passed on to the next waiter. */
  private async leaveLine(key: string, owner: string): Promise<void> {
    await this.callRelease(key, owner, this.defaults.ttlMs, '1');
  }

  protected async reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const [fence, count] = await this.callAcquire(hold.key, hold.owner, ttlMs, 'try');
    if (fence === hold.fence && count > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    if (fence > 0) await this.callRelease(hold.key, hold.owner, ttlMs, '1');
    return false;
  }

  /** The store counts holds itself, so every release goes to it. */
  protected async releaseStore(hold: Hold): Promise<StoreRelease> {
    const reply = await this.callRelease(hold.key, hold.owner, hold.leaseMs, '0');
    if (reply[0] === LockScriptCode.NotOwner) return 'not-owner';
    return reply[0] > 0 ? 'still-held' : 'released';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return (await this.redis.lockExtend(this.keyspace.lock(hold.key), hold.owner, ttlMs)) === LockScriptCode.Done;
  }

  protected async closeStore(): Promise<void> {
    if (this.notices && !this.options.subscriber) this.notices.close();
    if (this.options.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private callAcquire(key: string, owner: string, ttlMs: number, mode: 'try' | 'queue' | 'poll') {
    const k = this.keyspace;
    return this.redis.lockAcquire(
      k.lock(key),
      k.fence(key),
      k.queue(key),
      k.queueDeadlines(key),
      owner,
      ttlMs,
      mode,
      this.waiterLeaseMs,
      k.grantChannel,
      key,
    );
  }

  private async callRelease(key: string, owner: string, handOffLeaseMs: number, dropAll: '0' | '1') {
    const k = this.keyspace;
    const { channel, message } = k.releaseNotice(key);
    const reply = await this.redis.lockRelease(
      k.lock(key),
      k.fence(key),
      k.queue(key),
      k.queueDeadlines(key),
      owner,
      handOffLeaseMs,
      channel,
      message,
      k.grantChannel,
      key,
      dropAll,
    );
    // Handed to a waiter of this process: wake it now rather than after the notice's round trip.
    if (reply.length === 3) this.notices?.deliverHandoff(reply[1], key, reply[2], handOffLeaseMs);
    return reply;
  }

  private noticeBoard(): RedisLockNotices {
    // Its own connection: a subscribed connection can do nothing else, and it may queue commands until it is ready.
    this.notices ??= new RedisLockNotices(this.options.subscriber ?? this.redis.duplicate({ enableOfflineQueue: true, lazyConnect: false }));
    return this.notices;
  }
}
