import { duplicateSubscriber, type RedisClient } from '../../redis/connections.js';
import type { LockCapabilities } from '../distributed-lock.js';
import { redisKeys } from '../keys.js';
import { type Hold, sleepUntilWoken, type StoreGrant, type StoreRelease, type WaitBudget } from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';
import { ReleaseNotices } from '../release-notices.js';
import { defineLockCommands, outcomeOf } from '../scripts.js';

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

/** Longest sleep of a non-fair waiter when no notice comes and the holder's lease is long. */
const MAX_SLEEP_MS = 1_000;
/**
 * After freeing a lock that another process tried to take, this client's next waiter holds back this long, so that
 * process, woken by the release notice, can get it: local waiters are woken in microseconds, remote ones in a round trip.
 */
const YIELD_TO_OTHERS_MS = 5;

/** A waiter of this client for one lock, in non-fair mode. */
interface LocalWaiter {
  readonly owner: string;
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

/** A fair waiter's mailbox: the hand-off may arrive while the waiter is between two polls, so it is kept. */
interface HandoffSlot {
  grant: StoreGrant<string> | undefined;
  wake: () => void;
}

/**
 * The Redis lock: a hash {owner, count, fence} per lock, reentrant (Redisson style), taken and released by Lua
 * (lua/lock*.lua), with a fencing token issued on every new hold.
 *
 * Non-fair mode (lock cohorting): the waiters of one client line up locally and only the first talks to Redis, woken
 * by the lock's release notice (ReleaseNotices). A holder that took the lock from Redis reserved a block of fencing
 * tokens with it; while its process has waiters and tokens remain, a release passes the lock to the next of them
 * without a Redis call, each with the next token (every token issued elsewhere afterwards is larger). After
 * `maxLocalHandoffs` such passes the lock is freed in Redis, so other processes get their chance; the release gives
 * the unused tokens back, so the next holder's `previous` names the token that last wrote.
 *
 * Fair mode: every waiter joins a FIFO queue in Redis beside the hash; the release script hands the lock to the
 * queue's head and tells it on the lock's hand-off channel, so nobody is overtaken, across processes.
 *
 * Each hold's handle is the owner id Redis holds the lock under (the tenure's, or the waiter's own in fair mode).
 */
export class RedisLock extends LockClient<string> {
  readonly kind = 'redis' as const;
  readonly capabilities: LockCapabilities = { fair: true, publishesReleaseNotices: true };
  private readonly redis: RedisClient;
  private readonly notices: ReleaseNotices;
  /** The subscriber connection of notices this lock made for itself (closed with it). */
  private readonly ownSubscriber: RedisClient | undefined;
  private readonly waiterLeaseMs: number;
  private readonly maxLocalHandoffs: number;
  private readonly lines = new Map<string, LocalLine>();
  private readonly handoffSlots = new Map<string, HandoffSlot>();

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
    this.maxLocalHandoffs = options.maxLocalHandoffs ?? 16;
  }

  /** Never overtakes a queued fair waiter: a free lock with a queue goes to the queue's head. */
  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant<string> | null> {
    // Another owner of this client holds it: Redis would only say so.
    if (this.lines.get(key)?.holder !== undefined) return null;
    // No tokens reserved: a single attempt has no local waiters to pass the lock to.
    return (await this.startTenure(key, owner, ttlMs, 1)).grant;
  }

  protected waitStore(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    return budget.fair ? this.waitInLine(key, owner, ttlMs, budget) : this.waitLocally(key, owner, ttlMs, budget);
  }

  /**
   * On one Redis server, every attempt in one script call; a lock that needs more than the common case (a fair queue
   * beside it) is asked alone. A Redis Cluster keeps each lock in a slot of its own, so there each is its own call
   * (those for one node still leave in one write).
   */
  protected override async tryStoreMany(
    keys: readonly string[],
    owners: readonly string[],
    ttlMs: number,
  ): Promise<PromiseSettledResult<StoreGrant<string> | null>[]> {
    // Another owner of this client holds it: Redis would only say so.
    const asked = keys.flatMap((key, i) => (this.lines.get(key)?.holder === undefined ? [i] : []));
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
      const outcome = outcomeOf(code);
      if (outcome === 'done') {
        results[i] = Promise.resolve(this.newTenure(keys[i]!, owners[i]!, ttlMs, requestedAt, [code, previous, code]));
      } else if (outcome === 'ask-alone') results[i] = this.tryStore(keys[i]!, owners[i]!, ttlMs);
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
    if (outcomeOf(code) !== 'done') return { grant: null, pttl };
    return { grant: this.newTenure(key, owner, ttlMs, requestedAt, [code, previous ?? 0, lastFence ?? code]), pttl: 0 };
  }

  /**
   * A new hold taken from Redis: this client holds the lock, with tokens `fence`..`lastFence` to pass on locally.
   * `previous`: the token issued before `fence`, 0 for none remembered.
   */
  private newTenure(
    key: string,
    owner: string,
    ttlMs: number,
    requestedAt: number,
    [fence, previous, lastFence]: [number, number, number],
  ): StoreGrant<string> {
    const line = this.line(key);
    line.holder = owner;
    line.tenure = { redisOwner: owner, nextFence: fence + 1, lastFence, leaseMs: ttlMs, confirmedAt: requestedAt };
    return { fence, previousFence: previous, leaseMs: ttlMs, requestedAt, handle: owner };
  }

  /**
   * Non-fair waiting: in line behind this client's other waiters for the key; the first of them goes to Redis and,
   * when the lock is held elsewhere, waits for its release notice (at the latest until the holder's lease runs out).
   */
  private async waitLocally(
    key: string,
    owner: string,
    ttlMs: number,
    budget: WaitBudget,
  ): Promise<StoreGrant<string> | null> {
    const line = this.line(key);
    const me: LocalWaiter = { owner, grant: undefined, wake: () => {} };
    line.waiters.push(me);
    const ticket = this.notices.ticket();
    try {
      for (;;) {
        if (me.grant) return me.grant;
        budget.signal?.throwIfAborted();
        const remaining = budget.deadline - Date.now();
        if (line.holder === undefined && line.waiters[0] === me) {
          // Listening before the attempt: a release between the attempt and the wait still wakes us.
          await this.notices.listen(key, [key]);
          const mark = this.notices.mark();
          const { grant, pttl } = await this.startTenure(key, owner, ttlMs, this.maxLocalHandoffs + 1);
          if (grant) return grant;
          if (me.grant) continue;
          if (Date.now() >= budget.deadline) return null;
          const until = Date.now() + Math.min(budget.deadline - Date.now(), pttl > 0 ? pttl + 1 : 5, MAX_SLEEP_MS);
          await this.notices.wait(key, new Set([key]), { ticket, deadline: until, mark, signal: budget.signal });
          continue;
        }
        if (remaining <= 0) return null;
        // Behind another waiter of this client, or the lock is held here: woken by a hand-off or the head leaving.
        const sleep = sleepUntilWoken(Math.min(remaining, MAX_SLEEP_MS), budget.signal);
        me.wake = sleep.wake;
        try {
          await sleep.promise;
        } finally {
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
        if (outcomeOf(code) === 'done') return this.granted(key, owner, code, previous, ttlMs, requestedAt);
        if (slot.grant)
          return this.granted(key, owner, slot.grant.fence, 0, slot.grant.leaseMs, slot.grant.requestedAt);
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
        // The hand-off may have come while asleep (TypeScript cannot see the notice set it).
        const handed = slot.grant as StoreGrant<string> | undefined;
        if (handed) return this.granted(key, owner, handed.fence, 0, handed.leaseMs, handed.requestedAt);
      }
    } finally {
      this.handoffSlots.delete(owner);
    }
  }

  /** Leaves the fair queue; a hand-off that raced with giving up is passed on to the next waiter. */
  private async leaveLine(key: string, owner: string): Promise<void> {
    await this.callRelease(key, owner, this.defaults.ttlMs, '1', 0);
  }

  /** From a hand-off notice, or straight from the reply of this process's release that handed the lock on. */
  private deliverHandoff(owner: string, fence: number, leaseMs: number): void {
    const slot = this.handoffSlots.get(owner);
    if (!slot || slot.grant) return;
    slot.grant = { fence, leaseMs, requestedAt: Date.now() };
    slot.wake();
  }

  /** A fair grant: this client holds the lock under the waiter's own id, without reserved tokens. */
  private granted(
    key: string,
    owner: string,
    fence: number,
    previous: number | undefined,
    leaseMs: number,
    requestedAt: number,
  ) {
    const line = this.line(key);
    line.holder = owner;
    line.tenure = undefined;
    return { fence, previousFence: previous || undefined, leaseMs, requestedAt, handle: owner };
  }

  protected async reenterStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const [code, count] = await this.callAcquire(hold.key, hold.handle!, ttlMs, 'try', 1);
    if (outcomeOf(code) !== 'done') return false;
    if (count! > 1) return true;
    // The old hold had lapsed and this attempt took the lock afresh: not the same hold, so give it back.
    await this.callRelease(hold.key, hold.handle!, ttlMs, '1', 0);
    return false;
  }

  /** Redis counts re-entries; the last release passes the lock on within this client, or frees it in Redis. */
  protected async releaseStore(hold: Hold<string>, final: boolean): Promise<StoreRelease> {
    const spare = final ? this.tenureWithTokensLeft(hold) : undefined;
    if (spare && !this.closed) {
      const line = this.lines.get(hold.key)!;
      const next = line.waiters.find((w) => !w.grant);
      if (next) {
        line.holder = next.owner;
        const fence = spare.nextFence++;
        next.grant = {
          fence,
          previousFence: fence - 1,
          leaseMs: spare.leaseMs,
          requestedAt: spare.confirmedAt,
          handle: spare.redisOwner,
        };
        next.wake();
        return 'released';
      }
    }
    try {
      // Reserved tokens left unused go back, so the next holder's `previous` names the token that last wrote.
      const lastUsed = spare ? spare.nextFence - 1 : 0;
      const reply = await this.callRelease(hold.key, hold.handle!, hold.leaseMs, '0', lastUsed);
      if (outcomeOf(reply[0]) === 'not-owner') {
        this.forgetHolder(hold);
        return 'not-owner';
      }
      if (reply[0] > 0) return 'still-held';
      const othersWaiting = reply.length === 2 && reply[1] === 1;
      this.forgetHolder(hold, othersWaiting ? YIELD_TO_OTHERS_MS : 0);
      return 'released';
    } catch (error) {
      // Unknown outcome: this client stops counting the lock as its own; Redis frees it at the latest on expiry.
      if (final) this.forgetHolder(hold);
      throw error;
    }
  }

  /**
   * On one Redis server, the holds with nothing to pass on (no local waiter to hand over to, no reserved tokens to give
   * back, held once) go in one script call, which deletes those nobody else tried to take meanwhile; the rest, and
   * those, are released one call each, as on a Redis Cluster.
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
        holds.length * 2,
        ...holds.flatMap((hold) => [redisKeys.lock(hold.key), redisKeys.scriptKeys(hold.key)[2]]),
        ...holds.map((hold) => hold.handle!),
      )
      .catch((error: unknown) => error as Error);
    for (const [j, i] of plain.entries()) {
      const hold = holds[j]!;
      if (answers instanceof Error) {
        // Unknown outcome: this client stops counting the lock as its own; Redis frees it at the latest on expiry.
        this.forgetHolder(hold);
        results[i] = Promise.reject(answers);
        continue;
      }
      const outcome = outcomeOf(answers[j]!);
      if (outcome === 'ask-alone') results[i] = this.releaseStore(hold, true);
      else if (outcome === 'not-owner') {
        this.forgetHolder(hold);
        results[i] = Promise.resolve('not-owner');
      } else {
        // This process's waiters hear of it at once; nobody elsewhere waited (no notice is published).
        this.notices.notify(hold.key);
        this.forgetHolder(hold);
      }
    }
    return Promise.allSettled(results);
  }

  /** The hold's release would pass the lock to a local waiter, or give reserved tokens back. */
  private passesOn(hold: Hold<string>): boolean {
    return this.closed || this.tenureWithTokensLeft(hold) !== undefined;
  }

  /** The hold's own tenure, if it still has reserved tokens to pass on locally (or give back on release). */
  private tenureWithTokensLeft(hold: Hold<string>): Tenure | undefined {
    const line = this.lines.get(hold.key);
    const tenure = line?.tenure;
    const own = !!tenure && line!.holder === hold.owner && tenure.redisOwner === hold.handle;
    return own && tenure.nextFence <= tenure.lastFence ? tenure : undefined;
  }

  protected override holdLost(hold: Hold<string>): void {
    this.forgetHolder(hold);
  }

  protected async extendStore(hold: Hold<string>, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const extended = outcomeOf(await this.redis.lockExtend(redisKeys.lock(hold.key), hold.handle!, ttlMs)) === 'done';
    const tenure = this.lines.get(hold.key)?.tenure;
    if (extended && tenure && tenure.redisOwner === hold.handle) tenure.confirmedAt = requestedAt;
    return extended;
  }

  protected async closeStore(): Promise<void> {
    for (const line of this.lines.values()) for (const waiter of line.waiters) waiter.wake();
    for (const slot of this.handoffSlots.values()) slot.wake();
    if (this.ownSubscriber) {
      this.notices.close();
      this.ownSubscriber.disconnect();
    }
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
      if (this.lines.get(key) === line) this.lines.delete(key);
      return;
    }
    if (line.holder === undefined) line.waiters[0]?.wake();
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
    if (reply.length === 3) this.deliverHandoff(reply[1], reply[2], handOffLeaseMs);
    else if (reply[0] === 0) this.notices.notify(key);
    return reply;
  }
}
