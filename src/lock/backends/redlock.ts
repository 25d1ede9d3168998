import { once } from 'node:events';
import { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import { LockUnavailableError } from '../errors.js';
import { redisKeys } from '../keys.js';
import {
  clockDrift,
  type Hold,
  sleepUntilWoken,
  type StoreGrant,
  type StoreRelease,
  type WaitBudget,
} from '../hold.js';
import { LockClient, type LockClientOptions } from '../lock-client.js';
import { acquireLock, defineLockCommands, LockCode, releaseLock } from '../scripts.js';

export interface RedlockOptions extends LockClientOptions {
  /** Independent Redis nodes (not replicas of each other): an odd number, 3 or 5. */
  urls: string[];
  /** Per-node reply budget, far below the TTL, so a slow node costs little of the lease (default 200 ms). */
  nodeTimeoutMs?: number;
  /** Pause between attempts: `retryDelayMs` plus up to `retryJitterMs` at random, so contenders desynchronise. */
  retryDelayMs?: number;
  retryJitterMs?: number;
}

type Attempt = StoreGrant | 'taken' | 'unavailable';

/** How the nodes answered one round, as far as the round went. */
type Votes<T> = { yes: { node: Redis; reply: T }[]; no: number; failed: number };

/**
 * Redlock over N independent Redis nodes: the Redis lock's scripts on every node, granted when a majority grants within
 * the lease (validity = TTL − time spent − drift), released everywhere. A round is decided as soon as its outcome is
 * certain; a node that is down fails at once (no offline queue) and a slow one is not waited for, so one bad node of
 * three costs neither the wait budget nor the lease. Fencing: the largest of the granting nodes' tokens, recorded on a
 * majority in a second round (any later majority shares a node with it). Re-entries are counted here, not on nodes.
 */
export class RedlockLock extends LockClient {
  readonly kind = 'redlock' as const;
  readonly capabilities: LockCapabilities = { fair: false, retakes: false };
  readonly nodes: Redis[];
  readonly quorum: number;
  private readonly retryDelayMs: number;
  private readonly retryJitterMs: number;
  /** Resolves once every node connected for the first time, or its first connection timed out. */
  private readonly firstConnections: Promise<unknown>;

  constructor(options: RedlockOptions) {
    super(options);
    if (options.urls.length === 0) throw new Error('Redlock needs at least one Redis node');
    const nodeTimeoutMs = options.nodeTimeoutMs ?? 200;
    this.nodes = options.urls.map(
      (url) =>
        new Redis(url, {
          commandTimeout: nodeTimeoutMs,
          maxRetriesPerRequest: 1,
          // A node that is down answers at once with an error instead of queueing the command until it is back.
          enableOfflineQueue: false,
          // Keep trying a node that is down in the background, cheaply.
          retryStrategy: (times) => Math.min(times * 100, 1_000),
        }),
    );
    for (const node of this.nodes) {
      node.on('error', () => {});
      defineLockCommands(node);
    }
    this.firstConnections = Promise.all(
      this.nodes.map((node) => Promise.race([once(node, 'ready'), sleepUntilWoken(2_000).promise]).catch(() => {})),
    );
    this.quorum = Math.floor(this.nodes.length / 2) + 1;
    this.retryDelayMs = options.retryDelayMs ?? 50;
    this.retryJitterMs = options.retryJitterMs ?? 50;
  }

  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const attempt = await this.attempt(key, owner, ttlMs);
    if (attempt === 'unavailable') throw this.unavailable(key);
    return attempt === 'taken' ? null : attempt;
  }

  /** In line with this client's other waiters; a round without a quorum is tried again until the budget is spent. */
  protected override waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget) {
    return this.lines.wait(key, budget, async () => {
      const attempt = await this.attempt(key, owner, ttlMs);
      if (attempt === 'unavailable' && Date.now() >= budget.deadline) throw this.unavailable(key);
      // Contenders of other processes retry at different moments, so a release notice lost does not line them up.
      const retryMs = this.retryDelayMs + Math.random() * this.retryJitterMs;
      return { grant: typeof attempt === 'object' ? attempt : null, retryMs };
    });
  }

  private async attempt(key: string, owner: string, ttlMs: number): Promise<Attempt> {
    await this.firstConnections;
    const requestedAt = Date.now();
    const validFor = () => ttlMs - (Date.now() - requestedAt) - clockDrift(ttlMs);
    const votes = await this.round(
      (node) => acquireLock(node, key, owner, { leaseMs: ttlMs, mode: 'try' }),
      (reply) => reply[0] > 0,
    );
    if (votes.yes.length >= this.quorum && validFor() > 0) {
      const fence = Math.max(...votes.yes.map(({ reply }) => reply[0]));
      const recorded = await this.round(
        (node) => node.lockRaiseFence(redisKeys.lock(key), redisKeys.fence(key), owner, String(fence)),
        (reply) => reply !== LockCode.Lost,
        votes.yes.map(({ node }) => node),
      );
      if (recorded.yes.length >= this.quorum && validFor() > 0) return { fence, leaseMs: ttlMs, requestedAt };
    }
    // Not granted: undo the partial grants, on every node whose answer was not a plain no (one still out may yet
    // grant). Not awaited: a retry's acquire reaches each node on the same connection after this release.
    const unanswered = this.nodes.length - votes.yes.length - votes.no - votes.failed;
    if (votes.yes.length > 0 || votes.failed > 0 || unanswered > 0) void this.releaseEverywhere(key, owner, ttlMs);
    return votes.failed > this.nodes.length - this.quorum ? 'unavailable' : 'taken';
  }

  /** Re-entries are counted locally: only check that a majority still holds the lock for us. */
  protected reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return this.extendStore(hold, Math.max(ttlMs, hold.leaseMs));
  }

  protected async releaseStore(hold: Hold, final: boolean): Promise<StoreRelease> {
    if (!final) return 'released';
    const votes = await this.releaseEverywhere(hold.key, hold.owner, hold.leaseMs);
    if (votes.yes.length >= this.quorum) return 'released';
    if (votes.no > this.nodes.length - this.quorum) return 'lost';
    // Too few nodes answered: whatever they still hold for us expires with the lease.
    return votes.yes.length > 0 ? 'released' : 'lost';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const votes = await this.round(
      (node) => node.lockExtend(redisKeys.lock(hold.key), hold.owner, ttlMs),
      (reply) => reply !== LockCode.Lost,
    );
    if (votes.yes.length >= this.quorum && ttlMs - (Date.now() - requestedAt) - clockDrift(ttlMs) > 0) return true;
    if (votes.no > this.nodes.length - this.quorum) return false;
    throw this.unavailable(hold.key);
  }

  protected async closeStore(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.quit().catch(() => node.disconnect())));
  }

  private releaseEverywhere(key: string, owner: string, leaseMs: number) {
    return this.round(
      (node) => releaseLock(node, key, owner, { handOffLeaseMs: leaseMs, notice: '', dropAll: true }),
      (reply) => reply[0] !== LockCode.Lost,
    );
  }

  /**
   * Sends one command to each node and settles as soon as the round is decided: `quorum` nodes said yes, or so many
   * said no or failed that a quorum is out of reach. Later answers are not waited for.
   */
  private round<T>(call: (node: Redis) => Promise<T>, isYes: (reply: T) => boolean, nodes = this.nodes) {
    return new Promise<Votes<T>>((resolve) => {
      const votes: Votes<T> = { yes: [], no: 0, failed: 0 };
      const decide = () => {
        const answered = votes.yes.length + votes.no + votes.failed;
        const outOfReach = votes.no + votes.failed > this.nodes.length - this.quorum;
        if (votes.yes.length >= this.quorum || outOfReach || answered === nodes.length) {
          resolve({ yes: [...votes.yes], no: votes.no, failed: votes.failed });
        }
      };
      for (const node of nodes) {
        call(node).then(
          (reply) => (isYes(reply) ? votes.yes.push({ node, reply }) : votes.no++, decide()),
          () => (votes.failed++, decide()),
        );
      }
    });
  }

  private unavailable(key: string): LockUnavailableError {
    const reachable = this.nodes.filter((node) => node.status === 'ready').length;
    const detail = `${reachable} of ${this.nodes.length} Redis nodes reachable, ${this.quorum} needed for a quorum`;
    return new LockUnavailableError(key, detail);
  }
}
