import { sleepUntilWoken, type StoreGrant, type WaitBudget } from '../hold.js';
import { redisKeys } from '../keys.js';
import type { ReleaseNotices } from '../release-notices.js';

/** A fair waiter's mailbox: the hand-off may arrive while the waiter is between two polls, so it is kept. */
interface HandoffSlot {
  grant: StoreGrant | undefined;
  wake: () => void;
}

/** What the queue asks of the lock's scripts: join or poll the queue (taking the lock if it is this waiter's), leave it. */
export interface FairQueueCalls {
  acquire(
    key: string,
    owner: string,
    ttlMs: number,
    mode: 'queue' | 'poll',
  ): Promise<[number, number, number?, number?]>;
  leave(key: string, owner: string): Promise<void>;
}

/**
 * The Redis lock's fair mode: every waiter joins a FIFO queue in Redis beside the lock's hash; the release script
 * hands the lock to the queue's head and tells it on the lock's hand-off channel, so nobody is overtaken, across
 * processes. A waiter keeps its place only while it polls (every third of `waiterLeaseMs`), so a dead process's
 * place lapses; a hand-off wakes it at once.
 */
export class FairQueue {
  private readonly slots = new Map<string, HandoffSlot>();

  constructor(
    private readonly notices: ReleaseNotices,
    private readonly waiterLeaseMs: number,
    private readonly calls: FairQueueCalls,
  ) {}

  /** In line until the lock is this waiter's (its token and the previous one, if known), or the budget runs out. */
  async wait(key: string, owner: string, ttlMs: number, budget: WaitBudget): Promise<StoreGrant | null> {
    await this.notices.listen(this, redisKeys.grantedChannel(key), (message) => {
      const [waiter, fence, leaseMs] = message.split('\n');
      this.deliver(waiter!, Number(fence), Number(leaseMs));
    });
    const slot: HandoffSlot = { grant: undefined, wake: () => {} };
    this.slots.set(owner, slot);
    try {
      let mode: 'queue' | 'poll' = 'queue';
      for (;;) {
        const requestedAt = Date.now();
        const [code, , previous] = await this.calls.acquire(key, owner, ttlMs, mode);
        mode = 'poll';
        if (code > 0) return { fence: code, previousFence: previous || undefined, leaseMs: ttlMs, requestedAt };
        if (slot.grant) return slot.grant;
        const remaining = budget.deadline - Date.now();
        if (remaining <= 0) {
          await this.calls.leave(key, owner);
          return null;
        }
        const sleep = sleepUntilWoken(Math.min(remaining, this.waiterLeaseMs / 3), budget.signal);
        slot.wake = sleep.wake;
        try {
          await sleep.promise;
        } catch (aborted) {
          await this.calls.leave(key, owner);
          throw aborted;
        }
        // The hand-off may have come while asleep (TypeScript cannot see the notice set it).
        const handed = slot.grant as StoreGrant | undefined;
        if (handed) return handed;
      }
    } finally {
      this.slots.delete(owner);
    }
  }

  /** From a hand-off notice, or straight from the reply of this process's release that handed the lock on. */
  deliver(owner: string, fence: number, leaseMs: number): void {
    const slot = this.slots.get(owner);
    if (!slot || slot.grant) return;
    slot.grant = { fence, leaseMs, requestedAt: Date.now() };
    slot.wake();
  }

  /** Wakes every waiter (the lock is closing: each finds out for itself). */
  wakeAll(): void {
    for (const slot of this.slots.values()) slot.wake();
  }
}
