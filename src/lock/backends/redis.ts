import type { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import {
  type Hold,
  LockClient,
  type LockClientOptions,
  type StoreGrant,
  type StoreRelease,
  sleepUntilWoken,
  type WaitBudget,
} from '../lock-client.js';
import { ensureLockCommands, LockScriptCode } from './redis-commands.js';
import { namedLockKeyspace, type RedisLockKeyspace } from './redis-keyspace.js';
import { type Handoff, RedisLockNotices } from './redis-notices.js';

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
  /**
   * How many times in a row a release may pass the lock to a waiter of this client instead of freeing it (default 16):
   * the bound on how long other processes' waiters can be kept out in non-fair mode.
   */
  maxLocalHandoffs?: number;
}

/** Longest sleep between attempts of a non-fair waiter when no notice comes (a holder that died publishes none). */
const MAX_SLEEP_MS = 1_000;
/**
 * After freeing a lock that another process tried to take, this client's next waiter holds back this long, so that
 * process, woken by the release notice, can get it: local waiters are woken in microseconds, remote ones in a round trip.
 */
const YIELD_TO_OTHERS_MS = 5;

/** A waiter of this client for one lock, in non-fair mode. */
interface LocalWaiter {
  readonly owner: string;
  readonly ttlMs: number;
  /** Set by a release that passed the lock on within this client. */
  grant: StoreGrant<string> | undefined;
  wake: () => void;
}

/** Redis holds the lock for this client, under one owner id, with a block of fencing tokens reserved for it. */
interface Tenure {
  readonly redisOwner: string;
  nextFence: number;
  readonly lastFence: number;
  readonly leaseMs: number;
  /** When Redis last confirmed the lease: a hold passed on locally is valid only as long as that lease. */
  confirmedAt: number;
}

/** This client's view of one lock: which of its owners holds it, on what tenure, and who of its own waits behind. */
class LocalLine {
  holder: string | undefined;
  tenure: Tenure | undefined;
  readonly waiters: LocalWaiter[] = [];

  get idle(): boolean {
    return this.holder === undefined && this.waiters.length === 0;
  }
}

/**
 * The single-Redis lock: a hash {owner, count, fence} per lock (reentrant, Redisson style), taken and released by Lua.
 *
 * Non-fair mode (lock cohorting): the waiters of one client line up locally and only the first talks to Redis, woken
 * by release notices. A holder that took the lock from Redis reserved a block of fencing tokens with it; while its
 * own process has waiters and tokens remain, a release passes the lock to the next of them without a Redis call, each
 * with the next token (every token issued elsewhere afterwards is larger). After `maxLocalHandoffs` such passes the
 * lock is freed in Redis, so other processes get their chance.
 *
 * Fair mode: every waiter joins a FIFO queue in Redis beside the hash; the release script hands the lock to the
 * queue's head and tells it, so nobody is overtaken, across processes.
 *
 * Each hold's handle is the owner id Redis holds the lock under (the tenure's, or the waiter's own in fair mode).
 */
export class RedisLock extends LockClient<string> {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, releaseNotices: true };
  readonly keyspace: RedisLockKeyspace;
  private readonly redis: Redis;
  private readonly waiterLeaseMs: number;
  private readonly maxLocalHandoffs: number;
  private notices: RedisLockNotices | undefined;
  private readonly lines = new Map<string, LocalLine>();

  constructor(private readonly options: RedisLockOptions) {
    super(options);
    this.redis = options.redis;
    ensureLockCommands(this.redis);
    this.keyspace = options.keyspace ?? namedLockKeyspace();
    this.waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
    this.maxLocalHandoffs = options.maxLocalHandoffs ?? 16;
  }

  /** Never overtakes a queued fair waiter: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant<string> | null> {
    // Another owner of this client holds it: Redis would only say so.
    if (this.lines.get(key)?.holder !== undefined) return null;
    return this.startTenure(key, owner, ttlMs);
  }

  protected async waitStore(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    return budget.fair
      ? this.waitInLine(key, owner, ttlMs, budget)
      : this.waitLocallyThenForRelease(key, owner, ttlMs, budget);
  }

  /** One attempt at Redis; on success this client holds the lock with a block of tokens to pass on locally. */
  private async startTenure(key: string, owner: string, ttlMs: number): Promise<StoreGrant<string> | null> {
    const requestedAt = Date.now();
    const [fence, , lastFence] = await this.callAcquire(key, owner, ttlMs, 'try', this.maxLocalHandoffs + 1);
    if (fence <= 0) return null;
    const line = this.line(key);
    line.holder = owner;
    line.tenure = {
      redisOwner: owner,
      nextFence: fence + 1,
      lastFence: lastFence ?? fence,
      leaseMs: ttlMs,
      confirmedAt: requestedAt,
    };
    return { fence, leaseMs: ttlMs, requestedAt, handle: owner };
  }

  private async waitLocallyThenForRelease(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    const line = this.line(key);
    const me: LocalWaiter = { owner, ttlMs, grant: undefined, wake: () => {} };
    line.waiters.push(me);
    try {
      for (;;) {
        if (me.grant) return me.grant;
        budget.signal?.throwIfAborted();
        const isHead = line.holder === undefined && line.waiters[0] === me;
        let untilExpiry = MAX_SLEEP_MS;
        // Listening before the attempt: a release between the attempt and the sleep still wakes us.
        let released = false;
        let unlisten: (() => void) | undefined;
        try {
          if (isHead) {
            const notices = this.noticeBoard();
            const notice = this.keyspace.releaseNotice(key);
            await notices.listenForReleases(notice.channel);
            unlisten = notices.onRelease(notice, () => {
              released = true;
              me.wake();
            });
            const requestedAt = Date.now();
            const [fence, pttl, lastFence] = await this.callAcquire(
              key,
              owner,
              ttlMs,
              'try',
              this.maxLocalHandoffs + 1,
            );
            if (fence > 0) {
              line.holder = owner;
              line.tenure = {
                redisOwner: owner,
                nextFence: fence + 1,
                lastFence: lastFence ?? fence,
                leaseMs: ttlMs,
                confirmedAt: requestedAt,
              };
              return { fence, leaseMs: ttlMs, requestedAt, handle: owner };
            }
            // Woken by the release notice; at the latest when the holder's lease would run out.
            untilExpiry = pttl > 0 ? pttl + 1 : 5;
          }
          // Handed the lock, or told of a release, while the attempt was out: no sleep.
          if (me.grant || released) continue;
          const remaining = budget.deadline - Date.now();
          if (remaining <= 0) return null;
          const sleep = sleepUntilWoken(Math.min(remaining, untilExpiry, MAX_SLEEP_MS), budget.signal);
          me.wake = sleep.wake;
          await sleep.promise;
        } finally {
          unlisten?.();
          me.wake = () => {};
        }
      }
    } finally {
      line.waiters.splice(line.waiters.indexOf(me), 1);
      this.wakeHead(key, line);
    }
  }

  private async waitInLine(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    const notices = this.noticeBoard();
    await notices.listenForHandoffs(this.keyspace.grantChannel);
    const slot = notices.openSlot(owner, key);
    try {
      let mode: 'queue' | 'poll' = 'queue';
      for (;;) {
        const requestedAt = Date.now();
        const [fence] = await this.callAcquire(key, owner, ttlMs, mode);
        mode = 'poll';
        if (fence > 0) return this.granted(key, owner, { fence, leaseMs: ttlMs, requestedAt });
        const remaining = budget.deadline - Date.now();
        if (remaining <= 0 && !slot.handoff) {
          await this.leaveLine(key, owner);
          return null;
        }
        let handoff: Handoff | undefined;
        try {
          handoff = await slot.wait(Math.min(remaining, this.waiterLeaseMs / 3), budget.signal);
        } catch (aborted) {
          await this.leaveLine(key, owner);
          throw aborted;
        }
        if (handoff)
          return this.granted(key, owner, {
            fence: handoff.fence,
            leaseMs: handoff.leaseMs,
            requestedAt: handoff.receivedAt,
          });
      }
    } finally {
      notices.closeSlot(owner, key, slot);
    }
  }

  /** Leaves the fair queue; a hand-off that raced with giving up is passed on to the next waiter. */
  private async leaveLine(key: string, owner: string): Promise<void> {
    await this.callRelease(key, owner, this.defaults.ttlMs, '1');
  }

  protected async reenterStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const [fence, count] = await this.callAcquire(hold.key, hold.handle!, ttlMs, 'try', 1);
    if (fence > 0 && count > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    if (fence > 0) await this.callRelease(hold.key, hold.handle!, ttlMs, '1');
    return false;
  }

  /** The store counts re-entries; the last release passes the lock on within this client, or frees it in Redis. */
  protected async releaseStore(hold: Hold<string>, final: boolean): Promise<StoreRelease> {
    const line = this.lines.get(hold.key);
    const tenure = line?.tenure;
    if (final && !this.closed && line && tenure && line.holder === hold.owner && tenure.redisOwner === hold.handle) {
      const next = line.waiters.find((w) => !w.grant);
      if (next && tenure.nextFence <= tenure.lastFence) {
        line.holder = next.owner;
        next.grant = {
          fence: tenure.nextFence++,
          leaseMs: tenure.leaseMs,
          requestedAt: tenure.confirmedAt,
          handle: tenure.redisOwner,
        };
        next.wake();
        return 'released';
      }
    }
    try {
      const reply = await this.callRelease(hold.key, hold.handle!, hold.leaseMs, '0');
      if (reply[0] > 0) return 'still-held';
      const othersWaiting = reply.length === 2 && reply[1] === 1;
      this.forgetHolder(hold, othersWaiting ? YIELD_TO_OTHERS_MS : 0);
      return reply[0] === LockScriptCode.NotOwner ? 'not-owner' : 'released';
    } catch (error) {
      // Unknown outcome: this client stops counting the lock as its own; Redis frees it at the latest on expiry.
      if (final) this.forgetHolder(hold);
      throw error;
    }
  }

  protected override holdLost(hold: Hold<string>): void {
    this.forgetHolder(hold);
  }

  protected async extendStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const extended =
      (await this.redis.lockExtend(this.keyspace.lock(hold.key), hold.handle!, ttlMs)) === LockScriptCode.Done;
    const tenure = this.lines.get(hold.key)?.tenure;
    if (extended && tenure && tenure.redisOwner === hold.handle) tenure.confirmedAt = requestedAt;
    return extended;
  }

  protected async closeStore(): Promise<void> {
    for (const line of this.lines.values()) for (const waiter of line.waiters) waiter.wake();
    if (this.notices && !this.options.subscriber) this.notices.close();
    if (this.options.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private line(key: string): LocalLine {
    let line = this.lines.get(key);
    if (!line) {
      line = new LocalLine();
      this.lines.set(key, line);
    }
    return line;
  }

  private granted(key: string, owner: string, grant: StoreGrant<string>): StoreGrant<string> {
    const line = this.line(key);
    line.holder = owner;
    line.tenure = undefined;
    return { ...grant, handle: owner };
  }

  /** The hold ended in Redis (released or lost): the next local waiter goes to Redis, after `yieldMs`. */
  private forgetHolder(hold: Hold<string>, yieldMs = 0): void {
    const line = this.lines.get(hold.key);
    if (!line || line.holder !== hold.owner) return;
    line.holder = undefined;
    if (line.tenure?.redisOwner === hold.handle) line.tenure = undefined;
    if (yieldMs > 0 && line.waiters.length > 0) setTimeout(() => this.wakeHead(hold.key, line), yieldMs).unref();
    else this.wakeHead(hold.key, line);
  }

  /** The first local waiter takes over talking to Redis. */
  private wakeHead(key: string, line: LocalLine): void {
    if (line.idle) {
      this.lines.delete(key);
      return;
    }
    if (line.holder === undefined) line.waiters[0]?.wake();
  }

  private callAcquire(key: string, owner: string, ttlMs: number, mode: 'try' | 'queue' | 'poll', reserveTokens = 1) {
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
      reserveTokens,
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
    this.notices ??= new RedisLockNotices(
      this.options.subscriber ?? this.redis.duplicate({ enableOfflineQueue: true, lazyConnect: false }),
    );
    return this.notices;
  }
}
