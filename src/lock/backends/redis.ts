import { duplicateSubscriber, type RedisClient } from '../../redis/connections.js';
import type { LockCapabilities } from '../distributed-lock.js';
import { type Hold, type StoreGrant, type StoreRelease, type WaitBudget } from '../hold.js';
import { redisKeys } from '../keys.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';
import { ReleaseNotices } from '../release-notices.js';
import { acquireLock, defineLockCommands, LockCode, releaseLock } from '../scripts.js';
import { FairQueue } from './redis-fair-queue.js';
import { LocalLines, type Tenure } from './redis-local-lines.js';

export interface RedisLockOptions extends LockClientOptions {
  /** Connection for the lock scripts. */
  redis: RedisClient;
  /**
   * Where waiters hear of releases by other processes. The service passes its own, on its shared subscriber
   * connection. Default: one of this lock's own, on a duplicate connection opened at the first wait.
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
 * Each hold's handle is its tenure: the owner id Redis holds the lock under, and the tokens reserved with it.
 */
export class RedisLock extends LockClient<Tenure> {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, retakes: true };
  private readonly redis: RedisClient;
  private readonly notices: ReleaseNotices;
  /** The subscriber connection of notices this lock made for itself (closed with it). */
  private readonly ownSubscriber: RedisClient | undefined;
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
    const held = (key: string) => this.holdings.holdOf(key)?.done === false;
    this.lines = new LocalLines(this.notices, options.maxLocalHandoffs ?? 16, held, (key) =>
      this.holdings.released(key),
    );
    const waiterLeaseMs = options.waiterLeaseMs ?? 3_000;
    this.fairQueue = new FairQueue(this.notices, waiterLeaseMs, {
      acquire: (key, owner, leaseMs, mode) => acquireLock(this.redis, key, owner, { leaseMs, mode, waiterLeaseMs }),
      // A hand-off that raced with giving up is passed on to the next waiter.
      leave: async (key, owner) => void (await this.callRelease(key, owner, this.defaults.ttlMs, true, 0)),
    });
  }

  /** Never overtakes a queued fair waiter: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant<Tenure> | null> {
    // No tokens reserved: a single attempt has no local waiters to pass the lock to.
    return (await this.startTenure(key, owner, ttlMs, 1)).grant;
  }

  protected async waitStore(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<Tenure> | null> {
    if (!budget.fair) return this.lines.wait(key, budget, (reserve) => this.startTenure(key, owner, ttlMs, reserve));
    const grant = await this.fairQueue.wait(key, owner, ttlMs, budget);
    // Held under the waiter's own id, without reserved tokens.
    return grant && { ...grant, handle: newGrant(owner, ttlMs, grant.requestedAt, grant.fence, 0).handle };
  }

  /**
   * On one Redis server, every attempt in one script call. A Redis Cluster keeps each lock in a slot of its own, so
   * there each is its own call, all of them in flight at once.
   */
  protected override async tryStoreMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
  ): Promise<PromiseSettledResult<StoreGrant<Tenure> | null>[]> {
    if (this.redis.isCluster || keys.length < 2) return super.tryStoreMany(keys, owners, ttlMs);
    const requestedAt = Date.now();
    try {
      const answers = await this.redis.lockTryMany(
        keys.length * 3,
        ...keys.flatMap((key) => redisKeys.scriptKeys(key).slice(0, 3)),
        ...owners,
        ttlMs,
      );
      return keys.map((_, i) => {
        const [fence, previous] = [answers[2 * i]!, answers[2 * i + 1]!];
        const grant = fence === LockCode.Busy ? null : newGrant(owners[i]!, ttlMs, requestedAt, fence, previous);
        return { status: 'fulfilled', value: grant };
      });
    } catch (error) {
      return keys.map(() => ({ status: 'rejected', reason: error }));
    }
  }

  /** One attempt at Redis, reserving `reserve` tokens with a new hold; otherwise the holder's lease left (`pttl`). */
  private async startTenure(key: string, owner: string, ttlMs: number, reserve: number) {
    const requestedAt = Date.now();
    const [fence, pttl, previous, lastFence] = await acquireLock(this.redis, key, owner, {
      leaseMs: ttlMs,
      mode: 'try',
      reserve,
    });
    if (fence === LockCode.Busy) return { grant: null, pttl };
    return { grant: newGrant(owner, ttlMs, requestedAt, fence, previous ?? 0, lastFence ?? fence), pttl: 0 };
  }

  protected async reenterStore(hold: Hold<Tenure>, ttlMs: number): Promise<boolean> {
    const [fence, count] = await acquireLock(this.redis, hold.key, hold.handle!.redisOwner, {
      leaseMs: ttlMs,
      mode: 'try',
    });
    if (fence === LockCode.Busy) return false;
    if (count! > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    await this.callRelease(hold.key, hold.handle!.redisOwner, ttlMs, true, 0);
    return false;
  }

  /** Redis counts re-entries; the last release passes the lock on within this client, or frees it in Redis. */
  protected async releaseStore(hold: Hold<Tenure>, final: boolean): Promise<StoreRelease> {
    const spare = final ? this.lines.tokensLeft(hold) : undefined;
    if (spare && !this.closed && this.lines.passOn(hold)) return 'released';
    try {
      // Reserved tokens left unused go back, so the next holder's `previous` names the token that last wrote.
      const lastUsed = spare ? spare.nextFence - 1 : 0;
      const reply = await this.callRelease(hold.key, hold.handle!.redisOwner, hold.leaseMs, false, lastUsed);
      return this.released(hold, reply[0], reply.length === 2 && reply[1] === 1);
    } catch (error) {
      // Unknown outcome: Redis frees the lock at the latest on expiry; the next local waiter asks it.
      if (final) this.lines.freed(hold.key);
      throw error;
    }
  }

  /**
   * On one Redis server, the holds with nothing to pass on (no local waiter to hand over to, no reserved tokens to give
   * back) go in one script call; the rest, and every hold on a Redis Cluster, one call each.
   */
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
        this.notices.instanceId,
      )
      .catch((error: unknown) => error as Error);
    for (const [j, i] of plain.entries()) {
      const hold = holds[j]!;
      if (answers instanceof Error) {
        this.lines.freed(hold.key);
        results[i] = Promise.reject(answers);
        continue;
      }
      const [code, second, fence] = [Number(answers[3 * j]), answers[3 * j + 1]!, Number(answers[3 * j + 2])];
      if (fence > 0) this.fairQueue.deliver(String(second), fence, handOffLeaseMs);
      results[i] = Promise.resolve(this.released(hold, code, fence === 0 && second === 1));
    }
    return Promise.allSettled(results);
  }

  /** What a release's answer means here: `code` is the count of holds left, 0 when freed, or LockCode.Lost. */
  private released(hold: Hold<Tenure>, code: number, contended: boolean): StoreRelease {
    if (code > 0) return 'released';
    // Freed (or gone): the next local waiter goes to Redis, after a pause when another process wanted it meanwhile.
    this.lines.freed(hold.key, contended ? YIELD_TO_OTHERS_MS : 0);
    return code === 0 ? 'released' : 'lost';
  }

  /**
   * Every hold in one script call (on a Redis Cluster, where each lock has a slot of its own, one call per lock, all
   * in flight at once), each for the lease of the first: the holds a caller takes again together were taken together.
   * A hold with something to pass on here (a local waiter, reserved tokens) is left as it is: its release does that.
   */
  protected override async retakeStoreMany(
    holds: readonly Hold<Tenure>[],
  ): Promise<(StoreGrant<Tenure> | 'busy' | 'lost')[]> {
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
    const results: (StoreGrant<Tenure> | 'busy' | 'lost')[] = holds.map(() => 'busy');
    for (const [j, i] of asked.entries()) {
      const [fence, previous] = [answers[2 * j]!, answers[2 * j + 1]!];
      const owner = holds[i]!.handle!.redisOwner;
      if (fence === LockCode.Lost) results[i] = 'lost';
      else if (fence !== LockCode.Busy) results[i] = newGrant(owner, leaseMs, requestedAt, fence, previous);
    }
    return results;
  }

  /** The hold's release would pass the lock to a local waiter, or give reserved tokens back. */
  private passesOn(hold: Hold<Tenure>): boolean {
    return this.closed || this.lines.tokensLeft(hold) !== undefined;
  }

  protected override holdLost(hold: Hold<Tenure>): void {
    this.lines.freed(hold.key);
  }

  protected async extendStore(hold: Hold<Tenure>, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const tenure = hold.handle!;
    const extended =
      (await this.redis.lockExtend(redisKeys.lock(hold.key), tenure.redisOwner, ttlMs)) !== LockCode.Lost;
    // Holds passed on from the same tenure are valid that much longer too.
    if (extended) tenure.confirmedAt = requestedAt;
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

  private async callRelease(key: string, owner: string, handOffLeaseMs: number, dropAll: boolean, lastUsed: number) {
    const notice = this.notices.instanceId;
    const reply = await releaseLock(this.redis, key, owner, { handOffLeaseMs, notice, dropAll, lastUsed });
    // The head of the fair queue, when in this process, hears of its hand-off at once, not after the notice.
    if (reply.length === 3) this.fairQueue.deliver(reply[1], reply[2], handOffLeaseMs);
    return reply;
  }
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
