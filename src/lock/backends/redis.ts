import { duplicateSubscriber, type RedisClient } from '../../redis/connections.js';
import type { LockCapabilities } from '../distributed-lock.js';
import { redisKeys } from '../keys.js';
import { type Hold, type StoreGrant, type StoreRelease, type WaitBudget } from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';
import { ReleaseNotices } from '../release-notices.js';
import { defineLockCommands, LockCode } from '../scripts.js';
import { FairQueue } from './redis-fair-queue.js';
import { LocalLines } from './redis-local-lines.js';

export interface RedisLockOptions extends LockClientOptions {
  /** Connection for the lock scripts. */
  redis: RedisClient;
  /**
   * Where waiters learn of releases. The service passes its own, shared with the order flow, whose waiters must be
   * woken by this lock's releases. Default: one of this lock's own, on a duplicate connection opened at the first wait.
   */
  notices?: ReleaseNotices;
  /** Quit `redis` on close() (a connection made for this lock); a shared one is left open. */
  ownsConnection?: boolean;
  /** How long a queued fair waiter keeps its place without polling (default 3 s): a dead process's place lapses. */
  waiterLeaseMs?: number;
  /**
   * How many times in a row a release may pass the lock to a waiter of this client instead of freeing it (default 16):
   * the bound on how long other processes' waiters can be kept out in non-fair mode.
   */
  maxLocalHandoffs?: number;
}

/**
 * After freeing a lock that another process tried to take, this client's next waiter holds back this long, so that
 * process, woken by the release notice, can get it: local waiters are woken in microseconds, remote ones in a round trip.
 */
const YIELD_TO_OTHERS_MS = 5;

/**
 * The Redis lock: a hash {owner, count, fence} per lock, reentrant (Redisson style), taken and released by Lua
 * (lua/lock*.lua), with a fencing token issued on every new hold.
 *
 * Non-fair mode (lock cohorting, redis-local-lines.ts): the waiters of one client line up locally and only the first
 * talks to Redis; a release passes the lock to the next of them without a Redis call while its tenure has tokens left.
 * After `maxLocalHandoffs` such passes the lock is freed in Redis, so other processes get their chance; the release
 * gives the unused tokens back, so the next holder's `previous` names the token that last wrote.
 *
 * Fair mode (redis-fair-queue.ts): every waiter joins a FIFO queue in Redis beside the hash; the release script hands
 * the lock to the queue's head and tells it on the lock's hand-off channel, so nobody is overtaken, across processes.
 *
 * Each hold's handle is the owner id Redis holds the lock under (the tenure's, or the waiter's own in fair mode).
 */
export class RedisLock extends LockClient<string> {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, publishesReleaseNotices: true, retakes: true };
  private readonly redis: RedisClient;
  private readonly notices: ReleaseNotices;
  /** The subscriber connection of notices this lock made for itself (closed with it). */
  private readonly ownSubscriber: RedisClient | undefined;
  private readonly waiterLeaseMs: number;
  private readonly lines: LocalLines;
  private readonly fairQueue: FairQueue;

  constructor(private readonly options: RedisLockOptions) {
    super(options);
    this.redis = options.redis;
    defineLockCommands(this.redis);
    if (options.notices) {
      this.notices = options.notices;
    } else {
      // A subscribed connection can do nothing else; it connects when the first waiter subscribes.
      this.ownSubscriber = duplicateSubscriber(this.redis);
      this.ownSubscriber.on('error', () => {});
      this.notices = new ReleaseNotices(this.ownSubscriber);
    }
    this.waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
    this.lines = new LocalLines(this.notices, options.maxLocalHandoffs ?? 16);
    this.fairQueue = new FairQueue(this.notices, this.waiterLeaseMs, {
      acquire: (key, owner, ttlMs, mode) => this.callAcquire(key, owner, ttlMs, mode),
      // A hand-off that raced with giving up is passed on to the next waiter.
      leave: async (key, owner) => void (await this.callRelease(key, owner, this.defaults.ttlMs, '1', 0)),
    });
  }

  /** Never overtakes a queued fair waiter: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant<string> | null> {
    // Another owner of this client holds it: Redis would only say so.
    if (this.lines.isHeld(key)) return null;
    // No tokens reserved: a single attempt has no local waiters to pass the lock to.
    return (await this.startTenure(key, owner, ttlMs, 1)).grant;
  }

  protected async waitStore(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    if (budget.fair) {
      const grant = await this.fairQueue.wait(key, owner, ttlMs, budget);
      // This client holds the lock under the waiter's own id, without reserved tokens.
      if (grant) this.lines.holdWithoutTenure(key, owner);
      return grant && { ...grant, handle: owner };
    }
    return this.lines.wait(key, owner, budget, (reserve) => this.startTenure(key, owner, ttlMs, reserve));
  }

  /**
   * On one Redis server, every attempt in one script call. A Redis Cluster keeps each lock in a slot of its own, so there each is its own call,
   * all of them in flight at once.
   */
  protected override async tryStoreMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
  ): Promise<PromiseSettledResult<StoreGrant<string> | null>[]> {
    // Another owner of this client holds it: Redis would only say so.
    const asked = keys.flatMap((key, i) => (this.lines.isHeld(key) ? [] : [i]));
    if (this.redis.isCluster || asked.length < 2) return super.tryStoreMany(keys, owners, ttlMs);
    const requestedAt = Date.now();
    let answers: number[];
    try {
      answers = await this.redis.lockTryMany(
        asked.length * 3,
        ...asked.flatMap((i) => redisKeys.scriptKeys(keys[i]!).slice(0, 3)),
        ...asked.map((i) => owners[i]!),
        ttlMs,
      );
    } catch (error) {
      return keys.map(() => ({ status: 'rejected', reason: error }));
    }
    const results: Promise<StoreGrant<string> | null>[] = keys.map(() => Promise.resolve(null));
    for (const [j, i] of asked.entries()) {
      const [code, previous] = [answers[2 * j]!, answers[2 * j + 1]!];
      if (code === LockCode.Busy) continue;
      const tokens: [number, number, number] = [code, previous, code];
      results[i] = Promise.resolve(this.lines.startTenure(keys[i]!, owners[i]!, ttlMs, requestedAt, tokens));
    }
    return Promise.allSettled(results);
  }

  /**
   * One attempt at Redis; on success this client holds the lock with a block of tokens to pass on locally. Otherwise
   * the holder's lease left (`pttl`).
   */
  private async startTenure(key: string, owner: string, ttlMs: number, reserve: number) {
    const requestedAt = Date.now();
    const [code, pttl, previous, lastFence] = await this.callAcquire(key, owner, ttlMs, 'try', reserve);
    if (code === LockCode.Busy) return { grant: null, pttl };
    const tokens: [number, number, number] = [code, previous ?? 0, lastFence ?? code];
    return { grant: this.lines.startTenure(key, owner, ttlMs, requestedAt, tokens), pttl: 0 };
  }

  protected async reenterStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const [code, count] = await this.callAcquire(hold.key, hold.handle!, ttlMs, 'try', 1);
    if (code === LockCode.Busy) return false;
    if (count! > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    await this.callRelease(hold.key, hold.handle!, ttlMs, '1', 0);
    return false;
  }

  /** Redis counts re-entries; the last release passes the lock on within this client, or frees it in Redis. */
  protected async releaseStore(hold: Hold<string>, final: boolean): Promise<StoreRelease> {
    const spare = final ? this.lines.tokensLeft(hold) : undefined;
    if (spare && !this.closed && this.lines.passOn(hold)) return 'released';
    try {
      // Reserved tokens left unused go back, so the next holder's `previous` names the token that last wrote.
      const lastUsed = spare ? spare.nextFence - 1 : 0;
      const reply = await this.callRelease(hold.key, hold.handle!, hold.leaseMs, '0', lastUsed);
      return this.released(hold, reply[0], reply.length === 2 && reply[1] === 1);
    } catch (error) {
      // Unknown outcome: this client stops counting the lock as its own; Redis frees it at the latest on expiry.
      if (final) this.lines.forgetHolder(hold);
      throw error;
    }
  }

  /** What a release's answer means here: `code` is the hold count left, 0 when released, or LockCode.Lost. */
  private released(hold: Hold<string>, code: number, contended: boolean): StoreRelease {
    if (code > 0) return 'released';
    // Freed here: the next local waiter goes to Redis, after a pause when another process tried to take it meanwhile.
    if (code === 0) this.lines.forgetHolder(hold, contended ? YIELD_TO_OTHERS_MS : 0);
    else this.lines.forgetHolder(hold);
    return code === 0 ? 'released' : 'lost';
  }

  /**
   * On one Redis server, the holds with nothing to pass on (no local waiter to hand over to, no reserved tokens to give
   * back, held once) go in one script call; the rest, and every hold on a Redis Cluster, one call each.
   */
  protected override async releaseStoreMany(
    releases: readonly { hold: Hold<string>; final: boolean }[],
  ): Promise<PromiseSettledResult<StoreRelease>[]> {
    const plain = releases.flatMap(({ hold, final }, i) => (final && !this.passesOn(hold) ? [i] : []));
    if (this.redis.isCluster || plain.length < 2) return super.releaseStoreMany(releases);
    const results: Promise<StoreRelease>[] = releases.map(({ hold, final }, i) =>
      plain.includes(i) ? Promise.resolve('released') : this.releaseStore(hold, final),
    );
    const holds = plain.map((i) => releases[i]!.hold);
    const answers = await this.redis
      .lockReleaseMany(
        holds.length * 4,
        ...holds.flatMap((hold) => redisKeys.scriptKeys(hold.key)),
        ...holds.flatMap((hold) => [
          hold.handle!,
          redisKeys.releasedChannel(hold.key),
          redisKeys.grantedChannel(hold.key),
        ]),
        holds[0]!.leaseMs,
        this.notices.instanceId,
      )
      .catch((error: unknown) => error as Error);
    for (const [j, i] of plain.entries()) {
      const hold = holds[j]!;
      if (answers instanceof Error) {
        // Unknown outcome: this client stops counting the lock as its own; Redis frees it at the latest on expiry.
        this.lines.forgetHolder(hold);
        results[i] = Promise.reject(answers);
        continue;
      }
      const [code, second, fence] = [Number(answers[3 * j]), answers[3 * j + 1]!, Number(answers[3 * j + 2])];
      // This process's waiters hear of it at once, not after the notice's round trip.
      if (fence > 0) this.fairQueue.deliver(String(second), fence, holds[0]!.leaseMs);
      else if (code === 0) this.notices.notify(hold.key);
      results[i] = Promise.resolve(this.released(hold, code, fence === 0 && second === 1));
    }
    return Promise.allSettled(results);
  }

  /**
   * Every hold in one script call (on a Redis Cluster, where each lock has a slot of its own, one call per lock, all
   * in flight at once), each for the lease of the first: the holds a caller takes again together were taken together.
   * A hold with something to pass on here (a local waiter, reserved tokens) is left as it is: its release does that.
   */
  protected override async retakeStoreMany(
    holds: readonly Hold<string>[],
  ): Promise<(StoreGrant<string> | 'busy' | 'lost')[]> {
    const asked = holds.flatMap((hold, i) => (this.passesOn(hold) || this.lines.isWaitedFor(hold.key) ? [] : [i]));
    const picked = asked.map((i) => holds[i]!);
    const leaseMs = picked[0]?.leaseMs ?? this.defaults.ttlMs;
    const call = (some: readonly Hold<string>[]) =>
      this.redis.lockRetakeMany(
        some.length * 3,
        ...some.flatMap((hold) => redisKeys.scriptKeys(hold.key).slice(0, 3)),
        ...some.map((hold) => hold.handle!),
        leaseMs,
      );
    const requestedAt = Date.now();
    let answers: number[] = [];
    if (this.redis.isCluster) answers = (await Promise.all(picked.map((hold) => call([hold])))).flat();
    else if (picked.length > 0) answers = await call(picked);
    const results: (StoreGrant<string> | 'busy' | 'lost')[] = holds.map(() => 'busy');
    for (const [j, i] of asked.entries()) {
      const hold = holds[i]!;
      const [code, previous] = [answers[2 * j]!, answers[2 * j + 1]!];
      if (code === LockCode.Lost) {
        this.lines.forgetHolder(hold);
        results[i] = 'lost';
      } else if (code !== LockCode.Busy) {
        results[i] = this.lines.startTenure(hold.key, hold.handle!, leaseMs, requestedAt, [code, previous, code]);
      }
    }
    return results;
  }

  /** The hold's release would pass the lock to a local waiter, or give reserved tokens back. */
  private passesOn(hold: Hold<string>): boolean {
    return this.closed || this.lines.tokensLeft(hold) !== undefined;
  }

  protected override holdLost(hold: Hold<string>): void {
    this.lines.forgetHolder(hold);
  }

  protected async extendStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const extended = (await this.redis.lockExtend(redisKeys.lock(hold.key), hold.handle!, ttlMs)) !== LockCode.Lost;
    if (extended) this.lines.confirmed(hold, requestedAt);
    return extended;
  }

  protected async closeStore(): Promise<void> {
    this.lines.wakeAll();
    this.fairQueue.wakeAll();
    if (this.ownSubscriber) {
      this.notices.close();
      this.ownSubscriber.disconnect();
    }
    if (this.options.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private callAcquire(key: string, owner: string, ttlMs: number, mode: 'try' | 'queue' | 'poll', reserve = 1) {
    return this.redis.lockAcquire(
      ...redisKeys.scriptKeys(key),
      owner,
      ttlMs,
      mode,
      this.waiterLeaseMs,
      redisKeys.grantedChannel(key),
      reserve,
    );
  }

  private async callRelease(key: string, owner: string, handOffLeaseMs: number, dropAll: '0' | '1', lastUsed: number) {
    const reply = await this.redis.lockRelease(
      ...redisKeys.scriptKeys(key),
      owner,
      handOffLeaseMs,
      redisKeys.releasedChannel(key),
      this.notices.instanceId,
      redisKeys.grantedChannel(key),
      dropAll,
      lastUsed,
    );
    // This process's waiters hear of its releases at once, not after the notice's round trip.
    if (reply.length === 3) this.fairQueue.deliver(reply[1], reply[2], handOffLeaseMs);
    else if (reply[0] === 0) this.notices.notify(key);
    return reply;
  }
}
