import { Redis } from 'ioredis';
import type { LockCapabilities } from '../distributed-lock.js';
import { LockUnavailableError } from '../errors.js';
import {
  clockDrift,
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

export interface RedlockOptions extends LockClientOptions {
  /** Independent Redis nodes (not replicas of each other): an odd number, 3 or 5. */
  urls: string[];
  keyspace?: RedisLockKeyspace;
  /** Per-node reply budget, far below the TTL, so a dead node costs little of the lease (default 200 ms). */
  nodeTimeoutMs?: number;
  /** Pause between attempts: `retryDelayMs` plus up to `retryJitterMs` at random, so contenders desynchronise. */
  retryDelayMs?: number;
  retryJitterMs?: number;
}

type Attempt = StoreGrant | 'taken' | 'unavailable';

/**
 * Redlock over N independent Redis nodes: the same reentrant-lock scripts on every node, granted when a majority
 * grants within the lease (validity = TTL − time spent − drift), released everywhere, retried with jitter.
 *
 * Fencing: each granting node issues its own token (max(last + 1, its clock in µs)); the largest is chosen and, in a
 * second round, recorded on a majority. Any later majority shares a node with that one, so its token is larger.
 * Re-entries are counted here, not on the nodes: a node that missed the first round must not count a second hold.
 */
export class RedlockLock extends LockClient {
  readonly kind = 'redlock' as const;
  readonly capabilities: LockCapabilities = { fair: false, releaseNotices: false };
  readonly nodes: Redis[];
  readonly quorum: number;
  private readonly keyspace: RedisLockKeyspace;
  private readonly retryDelayMs: number;
  private readonly retryJitterMs: number;

  constructor(options: RedlockOptions) {
    super(options);
    if (options.urls.length === 0) throw new Error('Redlock needs at least one Redis node');
    const nodeTimeoutMs = options.nodeTimeoutMs ?? 200;
    this.nodes = options.urls.map(
      (url) =>
        new Redis(url, {
          commandTimeout: nodeTimeoutMs,
          maxRetriesPerRequest: 1,
          // A node that is down answers nothing: keep trying it in the background, cheaply.
          retryStrategy: (times) => Math.min(times * 100, 1_000),
        }),
    );
    for (const node of this.nodes) {
      node.on('error', () => {});
      ensureLockCommands(node);
    }
    this.quorum = Math.floor(this.nodes.length / 2) + 1;
    this.keyspace = options.keyspace ?? namedLockKeyspace();
    this.retryDelayMs = options.retryDelayMs ?? 50;
    this.retryJitterMs = options.retryJitterMs ?? 50;
  }

  protected async tryStore(key: string, owner: string, ttlMs: number): Promise<StoreGrant | null> {
    const attempt = await this.attempt(key, owner, ttlMs);
    if (attempt === 'unavailable') throw this.unavailable(key);
    return attempt === 'taken' ? null : attempt;
  }

  protected async waitStore(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    for (;;) {
      budget.signal?.throwIfAborted();
      const attempt = await this.attempt(key, owner, ttlMs);
      if (typeof attempt === 'object') return attempt;
      const remaining = budget.deadline - Date.now();
      if (remaining <= 0) {
        if (attempt === 'unavailable') throw this.unavailable(key);
        return null;
      }
      const pause = this.retryDelayMs + Math.random() * this.retryJitterMs;
      await sleepUntilWoken(Math.min(remaining, pause), budget.signal).promise;
    }
  }

  private async attempt(key: string, owner: string, ttlMs: number): Promise<Attempt> {
    const k = this.keyspace;
    const requestedAt = Date.now();
    const votes = await Promise.allSettled(
      this.nodes.map((node) =>
        node.lockAcquire(
          k.lock(key),
          k.fence(key),
          k.queue(key),
          k.queueDeadlines(key),
          owner,
          ttlMs,
          'try',
          1_000,
          k.grantChannel,
          key,
        ),
      ),
    );
    const granted = votes.flatMap((vote, i) =>
      vote.status === 'fulfilled' && vote.value[0] > 0 ? [{ node: this.nodes[i]!, fence: vote.value[0] }] : [],
    );
    const failed = votes.filter((vote) => vote.status === 'rejected').length;
    const validFor = () => ttlMs - (Date.now() - requestedAt) - clockDrift(ttlMs);
    if (granted.length >= this.quorum && validFor() > 0) {
      const fence = Math.max(...granted.map((g) => g.fence));
      const recorded = await Promise.allSettled(
        granted.map(({ node }) => node.lockRaiseFence(k.lock(key), k.fence(key), owner, String(fence))),
      );
      const raised = recorded.filter((r) => r.status === 'fulfilled' && r.value === LockScriptCode.Done).length;
      if (raised >= this.quorum && validFor() > 0) return { fence, leaseMs: ttlMs, requestedAt };
    }
    // Not granted: undo the partial grants on every node, reachable or not (one that timed out may have granted).
    if (granted.length > 0 || failed > 0) await this.releaseEverywhere(key, owner, ttlMs);
    return failed > this.nodes.length - this.quorum ? 'unavailable' : 'taken';
  }

  /** Re-entries are counted locally: only check that a majority still holds the lock for us. */
  protected reenterStore(hold: Hold, ttlMs: number): Promise<boolean> {
    return this.extendStore(hold, Math.max(ttlMs, hold.leaseMs));
  }

  protected async releaseStore(hold: Hold, final: boolean): Promise<StoreRelease> {
    if (!final) return 'still-held';
    const replies = await this.releaseEverywhere(hold.key, hold.owner, hold.leaseMs);
    const released = replies.filter((r) => r.status === 'fulfilled' && r.value[0] === LockScriptCode.Released).length;
    const refused = replies.filter((r) => r.status === 'fulfilled' && r.value[0] === LockScriptCode.NotOwner).length;
    if (released >= this.quorum) return 'released';
    if (refused > this.nodes.length - this.quorum) return 'not-owner';
    // Too few nodes answered: whatever they still hold for us expires with the lease.
    return released > 0 ? 'released' : 'not-owner';
  }

  protected async extendStore(hold: Hold, ttlMs: number): Promise<boolean> {
    const requestedAt = Date.now();
    const replies = await Promise.allSettled(
      this.nodes.map((node) => node.lockExtend(this.keyspace.lock(hold.key), hold.owner, ttlMs)),
    );
    const extended = replies.filter((r) => r.status === 'fulfilled' && r.value === LockScriptCode.Done).length;
    const refused = replies.filter((r) => r.status === 'fulfilled' && r.value === LockScriptCode.NotOwner).length;
    if (extended >= this.quorum && ttlMs - (Date.now() - requestedAt) - clockDrift(ttlMs) > 0) return true;
    if (refused > this.nodes.length - this.quorum) return false;
    throw this.unavailable(hold.key);
  }

  protected async closeStore(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.quit().catch(() => node.disconnect())));
  }

  private releaseEverywhere(key: string, owner: string, leaseMs: number) {
    const k = this.keyspace;
    const { channel, message } = k.releaseNotice(key);
    return Promise.allSettled(
      this.nodes.map((node) =>
        node.lockRelease(
          k.lock(key),
          k.fence(key),
          k.queue(key),
          k.queueDeadlines(key),
          owner,
          leaseMs,
          channel,
          message,
          k.grantChannel,
          key,
          '1',
        ),
      ),
    );
  }

  private unavailable(key: string): LockUnavailableError {
    const reachable = this.nodes.filter((node) => node.status === 'ready').length;
    return new LockUnavailableError(
      key,
      `${reachable} of ${this.nodes.length} Redis nodes reachable, ${this.quorum} needed for a quorum`,
    );
  }
}
