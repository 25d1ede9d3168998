import { duplicateSubscriber, type RedisClient } from '../../redis/connections.js';
import type { LockCapabilities } from '../distributed-lock.js';
import type { Hold, StoreGrant, StoreRelease, WaitBudget } from '../hold.js';
import { redisKeys } from '../keys.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';
import { ReleaseNotices } from '../release-notices.js';
import { acquireLock, defineLockCommands, LockCode, releaseLock } from '../scripts.js';
import { HEAD_RECHECK_MS } from '../waiting-lines.js';
import { FairQueue } from './redis-fair-queue.js';

export interface RedisLockOptions extends LockClientOptions {
  /** Connection for the lock scripts. */
  redis: RedisClient;
  /** Quit `redis` on close() (a connection made for this lock); a shared one is left open. */
  ownsConnection?: boolean;
  /** How long a queued fair waiter keeps its place without polling (default 3 s): a dead process's place lapses. */
  waiterLeaseMs?: number;
  /** How many times in a row a release may hand the lock to a waiter here instead of freeing it (default 16). */
  maxLocalHandoffs?: number;
}

/** Redis holds the lock for this client, under one owner id, with a block of fencing tokens reserved for it. */
interface Tenure {
  readonly redisOwner: string;
  nextFence: number;
  readonly lastFence: number;
  readonly leaseMs: number;
  /** When Redis last confirmed the lease: a hold handed on within this client is valid only as long as that lease. */
  confirmedAt: number;
}

type Retake = StoreGrant<Tenure> | 'busy' | 'lost';

/**
 * The Redis lock: a hash {owner, count, fence} per lock, reentrant (Redisson style), taken and released by Lua
 * (lua/lock*.lua), with a fencing token issued on every new hold. Its scripts publish the release notices.
 *
 * Non-fair mode (lock cohorting): the first of this client's waiters for a lock takes it from Redis with a block of
 * fencing tokens (its tenure, the hold's handle); while this client has waiters and tokens remain, a release hands the
 * lock to the next of them without a Redis call, each with the next token (every token issued elsewhere afterwards is
 * larger). After `maxLocalHandoffs` such passes the lock is freed in Redis, so other processes get their chance; the
 * release gives the unused tokens back, so the next holder's `previous` names the token that last wrote.
 *
 * Fair mode (redis-fair-queue.ts): every waiter joins a FIFO queue in Redis beside the hash; the release script hands
 * the lock to the queue's head and tells it on the lock's hand-off channel, so nobody is overtaken, across processes.
 */
export class RedisLock extends LockClient<Tenure> {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, retakes: true };
  protected override readonly announcesReleases = true;
  private readonly redis: RedisClient;
  /** The subscriber connection of the notices this lock made for itself (closed with it). */
  private readonly ownSubscriber: RedisClient | undefined;
  private readonly fairQueue: FairQueue;

  constructor(private readonly options: RedisLockOptions) {
    // A subscribed connection can do nothing else; it connects when the first waiter subscribes.
    const ownSubscriber = options.notices ? undefined : duplicateSubscriber(options.redis).on('error', () => {});
    super({ ...options, notices: options.notices ?? new ReleaseNotices(ownSubscriber!) });
    this.ownSubscriber = ownSubscriber;
    this.redis = options.redis;
    defineLockCommands(this.redis);
    const waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
    this.fairQueue = new FairQueue(this.notices!, waiterLeaseMs, {
      acquire: (key, owner, leaseMs, mode) => acquireLock(this.redis, key, owner, { leaseMs, mode, waiterLeaseMs }),
      // A hand-off that raced with giving up is passed on to the next waiter.
      leave: async (key, owner) => void (await this.callRelease(key, owner, this.defaults.ttlMs, true, 0)),
    });
  }

  /** Never overtakes a queued fair waiter. No tokens reserved: a single attempt has no waiters to hand the lock to. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant<Tenure> | null> {
    return (await this.startTenure(key, owner, ttlMs, 1)).grant;
  }

  protected override async waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget) {
    const reserve = (this.options.maxLocalHandoffs ?? 16) + 1;
    if (!budget.fair) return this.lines.wait(key, budget, () => this.startTenure(key, owner, ttlMs, reserve));
    const grant = await this.fairQueue.wait(key, owner, ttlMs, budget);
    // Held under the waiter's own id, without reserved tokens.
    return grant && { ...grant, handle: newGrant(owner, ttlMs, grant.requestedAt, grant.fence, 0).handle };
  }

  /** On one Redis server, every attempt in one script call; on a Cluster (a slot per lock), one call each, at once. */
  protected override async tryStoreMany(keys: readonly string[], owners: readonly string[], ttlMs: number) {
    if (this.redis.isCluster || keys.length < 2) return super.tryStoreMany(keys, owners, ttlMs);
    const requestedAt = Date.now();
    try {
      const locks = keys.flatMap((key) => redisKeys.scriptKeys(key).slice(0, 3));
      const answers = await this.redis.lockTryMany(keys.length * 3, ...locks, ...owners, ttlMs);
      return keys.map((_, i) => {
        const [fence, previous] = [answers[2 * i]!, answers[2 * i + 1]!];
        const grant = fence === LockCode.Busy ? null : newGrant(owners[i]!, ttlMs, requestedAt, fence, previous);
        return { status: 'fulfilled', value: grant } as const;
      });
    } catch (error) {
      return keys.map(() => ({ status: 'rejected', reason: error }) as const);
    }
  }

  /** One attempt at Redis, reserving `reserve` tokens with a new hold; if busy, retried once the holder's lease ends. */
  private async startTenure(key: string, owner: string, ttlMs: number, reserve: number) {
    const requestedAt = Date.now();
    const options = { leaseMs: ttlMs, mode: 'try', reserve } as const;
    const [fence, pttl, previous, lastFence] = await acquireLock(this.redis, key, owner, options);
    if (fence === LockCode.Busy) return { grant: null, retryMs: Math.min(pttl > 0 ? pttl + 1 : 5, HEAD_RECHECK_MS) };
    return { grant: newGrant(owner, ttlMs, requestedAt, fence, previous ?? 0, lastFence ?? fence) };
  }

  protected async reenterStore(hold: Hold<Tenure>, ttlMs: number): Promise<boolean> {
    const owner = hold.handle!.redisOwner;
    const [fence, count] = await acquireLock(this.redis, hold.key, owner, { leaseMs: ttlMs, mode: 'try' });
    if (fence === LockCode.Busy) return false;
    if (count! > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    await this.callRelease(hold.key, owner, ttlMs, true, 0);
    return false;
  }

  /** Redis counts re-entries; the last release hands the lock on within this client, or frees it in Redis. */
  protected async releaseStore(hold: Hold<Tenure>, final: boolean): Promise<StoreRelease> {
    const tenure = final ? tokensLeft(hold) : undefined;
    if (tenure && !this.closed && this.lines.handOff(hold.key, () => nextGrant(tenure))) return 'handed-on';
    // Reserved tokens left unused go back, so the next holder's `previous` names the token that last wrote.
    const lastUsed = tenure ? tenure.nextFence - 1 : 0;
    const reply = await this.callRelease(hold.key, hold.handle!.redisOwner, hold.leaseMs, false, lastUsed);
    return released(reply[0], reply.length === 2 && reply[1] === 1);
  }

  /** On one Redis server, the holds with nothing to pass on go in one script call; the rest, and on a Cluster all, one each. */
  protected override async releaseStoreMany(
    releases: readonly { hold: Hold<Tenure>; final: boolean }[],
  ): Promise<PromiseSettledResult<StoreRelease>[]> {
    const plain = releases.flatMap(({ hold, final }, i) => (final && !this.passesOn(hold) ? [i] : []));
    if (this.redis.isCluster || plain.length < 2) return super.releaseStoreMany(releases);
    const results: Promise<StoreRelease>[] = releases.map(({ hold, final }, i) =>
      plain.includes(i) ? Promise.resolve('released') : this.releaseStore(hold, final),
    );
    const holds = plain.map((i) => releases[i]!.hold);
    const handOffLeaseMs = holds[0]!.leaseMs;
    const answers = await this.redis
      .lockReleaseMany(
        holds.length * 4,
        ...holds.flatMap((hold) => redisKeys.scriptKeys(hold.key)),
        ...holds.flatMap(({ key, handle }) => [
          handle!.redisOwner,
          redisKeys.releasedChannel(key),
          redisKeys.grantedChannel(key),
        ]),
        handOffLeaseMs,
        this.clientId,
      )
      .catch((error: unknown) => error as Error);
    for (const [j, i] of plain.entries()) {
      if (answers instanceof Error) {
        results[i] = Promise.reject(answers);
        continue;
      }
      const [code, second, fence] = [Number(answers[3 * j]), answers[3 * j + 1]!, Number(answers[3 * j + 2])];
      if (fence > 0) this.fairQueue.deliver(String(second), fence, handOffLeaseMs);
      results[i] = Promise.resolve(released(code, fence === 0 && second === 1));
    }
    return Promise.allSettled(results);
  }

  /**
   * Every hold in one script call (on a Cluster, one per lock, at once), each for the lease of the first: holds taken
   * again together were taken together. One with something to pass on here is left as it is: its release does that.
   */
  protected override async retakeStoreMany(holds: readonly Hold<Tenure>[]): Promise<Retake[]> {
    const asked = holds.flatMap((hold, i) => (this.passesOn(hold) || this.holdings.isWaitedFor(hold.key) ? [] : [i]));
    const picked = asked.map((i) => holds[i]!);
    const leaseMs = picked[0]?.leaseMs ?? this.defaults.ttlMs;
    const call = (some: readonly Hold<Tenure>[]) =>
      this.redis.lockRetakeMany(
        some.length * 3,
        ...some.flatMap((hold) => redisKeys.scriptKeys(hold.key).slice(0, 3)),
        ...some.map((hold) => hold.handle!.redisOwner),
        leaseMs,
      );
    const requestedAt = Date.now();
    let answers: number[] = [];
    if (this.redis.isCluster) answers = (await Promise.all(picked.map((hold) => call([hold])))).flat();
    else if (picked.length > 0) answers = await call(picked);
    const results: Retake[] = holds.map(() => 'busy');
    for (const [j, i] of asked.entries()) {
      const [fence, previous] = [answers[2 * j]!, answers[2 * j + 1]!];
      const owner = holds[i]!.handle!.redisOwner;
      if (fence === LockCode.Lost) results[i] = 'lost';
      else if (fence !== LockCode.Busy) results[i] = newGrant(owner, leaseMs, requestedAt, fence, previous);
    }
    return results;
  }

  /** The hold's release would pass the lock to a waiter here, or give reserved tokens back. */
  private passesOn(hold: Hold<Tenure>): boolean {
    return this.closed || tokensLeft(hold) !== undefined;
  }

  protected async extendStore(hold: Hold<Tenure>, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const tenure = hold.handle!;
    const extended =
      (await this.redis.lockExtend(redisKeys.lock(hold.key), tenure.redisOwner, ttlMs)) !== LockCode.Lost;
    // Holds handed on from the same tenure are valid that much longer too.
    if (extended) tenure.confirmedAt = requestedAt;
    return extended;
  }

  protected async closeStore(): Promise<void> {
    this.fairQueue.wakeAll();
    if (this.ownSubscriber) {
      this.notices!.close();
      this.ownSubscriber.disconnect();
    }
    if (this.options.ownsConnection) await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private async callRelease(key: string, owner: string, handOffLeaseMs: number, dropAll: boolean, lastUsed: number) {
    const notice = this.clientId;
    const reply = await releaseLock(this.redis, key, owner, { handOffLeaseMs, notice, dropAll, lastUsed });
    // The head of the fair queue, when in this process, hears of its hand-off at once, not after the notice.
    if (reply.length === 3) this.fairQueue.deliver(reply[1], reply[2], handOffLeaseMs);
    return reply;
  }
}

/** What a release's answer means: `code` is the count of holds left, 0 when freed, or LockCode.Lost. */
function released(code: number, contended: boolean): StoreRelease {
  if (code === LockCode.Lost) return 'lost';
  return code === 0 && contended ? 'contended' : 'released';
}

/** The hold's tenure, if it still has reserved tokens to hand on (or give back on release). */
function tokensLeft(hold: Hold<Tenure>): Tenure | undefined {
  const tenure = hold.handle;
  return tenure && tenure.nextFence <= tenure.lastFence ? tenure : undefined;
}

/** The grant of a hand-off within this client: the tenure's next token, valid as long as its confirmed lease. */
function nextGrant(tenure: Tenure): StoreGrant<Tenure> {
  const fence = tenure.nextFence++;
  return { fence, previousFence: fence - 1, leaseMs: tenure.leaseMs, requestedAt: tenure.confirmedAt, handle: tenure };
}

/** A new hold in Redis under `owner`, with tokens up to `lastFence` reserved for hand-offs within this client. */
function newGrant(
  owner: string,
  leaseMs: number,
  requestedAt: number,
  fence: number,
  previous: number,
  lastFence = fence,
) {
  const handle: Tenure = { redisOwner: owner, nextFence: fence + 1, lastFence, leaseMs, confirmedAt: requestedAt };
  return { fence, previousFence: previous, leaseMs, requestedAt, handle };
}
