import type { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import { redisKeys } from '../keys.js';
import {
  type Hold,
  LockClient,
  type LockClientOptions,
  type StoreGrant,
  type StoreRelease,
  sleepUntilWoken,
  type WaitBudget,
} from '../lock-client.js';
import { ReleaseNotices } from '../release-notices.js';
import { defineLockCommands, outcomeOf } from '../scripts.js';

export interface RedisLockOptions extends LockClientOptions {
  /** Connection for the lock scripts. */
  redis: Redis;
  /**
   * Where waiters learn of releases. The service passes its own, shared with the order flow, whose waiters must be
   * woken by this lock's releases. Default: one of this lock's own, on a duplicate connection opened at the first wait.
   */
  notices?: ReleaseNotices;
  /** Quit `redis` on close() (a connection made for this lock); a shared one is left open. */
  ownsConnection?: boolean;
  /** How long a queued fair waiter keeps its place without polling (default 3 s): a dead process's place lapses. */
  waiterLeaseMs?: number;
}

/** Longest sleep of a non-fair waiter when no notice comes and the holder's lease is long. */
const MAX_SLEEP_MS = 1_000;

/** A fair waiter's mailbox: the hand-off may arrive while the waiter is between two polls, so it is kept. */
interface HandoffSlot {
  grant: StoreGrant | undefined;
  wake: () => void;
}

/**
 * The Redis lock: a hash {owner, count, fence} per lock, reentrant (Redisson style), taken and released by Lua
 * (lua/lock*.lua), with a fencing token issued on every new hold.
 *
 * Non-fair mode: waiters are woken by release notices (ReleaseNotices), the longest waiter of this process first;
 * a release by this process wakes its next waiter without the round trip through Redis.
 *
 * Fair mode: every waiter joins a FIFO queue in Redis beside the hash; the release script hands the lock to the
 * queue's head and tells it on the lock's hand-off channel, so nobody is overtaken, across processes.
 */
export class RedisLock extends LockClient {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, publishesReleaseNotices: true };
  private readonly redis: Redis;
  private readonly notices: ReleaseNotices;
  /** The subscriber connection of notices this lock made for itself (closed with it). */
  private readonly ownSubscriber: Redis | undefined;
  private readonly waiterLeaseMs: number;
  private readonly handoffSlots = new Map<string, HandoffSlot>();

  constructor(private readonly options: RedisLockOptions) {
    super(options);
    this.redis = options.redis;
    defineLockCommands(this.redis);
    if (options.notices) {
      this.notices = options.notices;
    } else {
      // A subscribed connection can do nothing else; it connects when the first waiter subscribes.
      this.ownSubscriber = this.redis.duplicate({ lazyConnect: true, enableOfflineQueue: true });
      this.ownSubscriber.on('error', () => {});
      this.notices = new ReleaseNotices(this.ownSubscriber);
    }
    this.waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
  }

  /** Never overtakes a queued fair waiter: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const requestedAt = Date.now();
    const [code, , previous] = await this.callAcquire(key, owner, ttlMs, 'try');
    return outcomeOf(code) === 'done' ? grant(code, previous, ttlMs, requestedAt) : null;
  }

  protected waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    return budget.fair ? this.waitInLine(key, owner, ttlMs, budget) : this.waitForRelease(key, owner, ttlMs, budget);
  }

  private async waitForRelease(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant | null> {
    const ticket = this.notices.ticket();
    // Listening before the first attempt: a release between an attempt and the wait after it still wakes us.
    await this.notices.listen(key, [key]);
    const accepts = new Set([key]);
    for (;;) {
      budget.signal?.throwIfAborted();
      const mark = this.notices.mark();
      const requestedAt = Date.now();
      const [code, pttl, previous] = await this.callAcquire(key, owner, ttlMs, 'try');
      if (outcomeOf(code) === 'done') return grant(code, previous, ttlMs, requestedAt);
      const remaining = budget.deadline - Date.now();
      if (remaining <= 0) return null;
      // Woken by the release notice; at the latest when the holder's lease runs out (a dead holder sends none).
      const untilExpiry = pttl > 0 ? pttl + 1 : 5;
      const deadline = Date.now() + Math.min(remaining, untilExpiry, MAX_SLEEP_MS);
      await this.notices.wait(key, accepts, { ticket, deadline, mark, signal: budget.signal });
    }
  }

  private async waitInLine(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    await this.notices.listenTo(redisKeys.grantedChannel(key), (message) => {
      const [waiter, fence, leaseMs] = message.split('\n');
      this.deliverHandoff(waiter!, Number(fence), Number(leaseMs));
    });
    const slot: HandoffSlot = { grant: undefined, wake: () => {} };
    this.handoffSlots.set(owner, slot);
    try {
      let mode: 'queue' | 'poll' = 'queue';
      for (;;) {
        const requestedAt = Date.now();
        const [code, , previous] = await this.callAcquire(key, owner, ttlMs, mode);
        mode = 'poll';
        if (outcomeOf(code) === 'done') return grant(code, previous, ttlMs, requestedAt);
        if (slot.grant) return slot.grant;
        const remaining = budget.deadline - Date.now();
        if (remaining <= 0) {
          await this.leaveLine(key, owner);
          return null;
        }
        const sleep = sleepUntilWoken(Math.min(remaining, this.waiterLeaseMs / 3), budget.signal);
        slot.wake = sleep.wake;
        try {
          await sleep.promise;
        } catch (aborted) {
          await this.leaveLine(key, owner);
          throw aborted;
        }
        if (slot.grant) return slot.grant;
      }
    } finally {
      this.handoffSlots.delete(owner);
    }
  }

  /** Leaves the fair queue; a hand-off that raced with giving up is passed on to the next waiter. */
  private async leaveLine(key: string, owner: string): Promise<void> {
    await this.callRelease(key, owner, this.defaults.ttlMs, '1');
  }

  /** From a hand-off notice, or straight from the reply of this process's release that handed the lock on. */
  private deliverHandoff(owner: string, fence: number, leaseMs: number): void {
    const slot = this.handoffSlots.get(owner);
    if (!slot || slot.grant) return;
    slot.grant = { fence, leaseMs, requestedAt: Date.now() };
    slot.wake();
  }

  protected async reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const [code, count] = await this.callAcquire(hold.key, hold.owner, ttlMs, 'try');
    if (outcomeOf(code) !== 'done') return false;
    if (count! > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    await this.callRelease(hold.key, hold.owner, ttlMs, '1');
    return false;
  }

  /** Redis counts re-entries too: every release goes to the script, the last one frees or hands on the lock. */
  protected async releaseStore(hold: Hold): Promise<StoreRelease> {
    const reply = await this.callRelease(hold.key, hold.owner, hold.leaseMs, '0');
    if (outcomeOf(reply[0]) === 'not-owner') return 'not-owner';
    return reply[0] > 0 ? 'still-held' : 'released';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return outcomeOf(await this.redis.lockExtend(redisKeys.lock(hold.key), hold.owner, ttlMs)) === 'done';
  }

  protected async closeStore(): Promise<void> {
    for (const slot of this.handoffSlots.values()) slot.wake();
    if (this.ownSubscriber) {
      this.notices.close();
      this.ownSubscriber.disconnect();
    }
    if (this.options.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private callAcquire(key: string, owner: string, ttlMs: number, mode: 'try' | 'queue' | 'poll') {
    return this.redis.lockAcquire(
      redisKeys.lock(key),
      redisKeys.fence(key),
      redisKeys.queue(key),
      redisKeys.queueDeadlines(key),
      owner,
      ttlMs,
      mode,
      this.waiterLeaseMs,
      redisKeys.grantedChannel(key),
    );
  }

  private async callRelease(key: string, owner: string, handOffLeaseMs: number, dropAll: '0' | '1') {
    const reply = await this.redis.lockRelease(
      redisKeys.lock(key),
      redisKeys.fence(key),
      redisKeys.queue(key),
      redisKeys.queueDeadlines(key),
      owner,
      handOffLeaseMs,
      redisKeys.releasedChannel(key),
      this.notices.instanceId,
      redisKeys.grantedChannel(key),
      dropAll,
    );
    // This process's waiters hear of its releases at once, not after the notice's round trip.
    if (reply.length === 3) this.deliverHandoff(reply[1], reply[2], handOffLeaseMs);
    else if (reply[0] === 0) this.notices.notify(key);
    return reply;
  }
}

function grant(fence: number, previous: number | undefined, leaseMs: number, requestedAt: number): StoreGrant {
  return { fence, previousFence: previous || undefined, leaseMs, requestedAt };
}
