import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DistributedLock, LockLease } from '../../src/lock/distributed-lock.js';
import { runAsLockOwner } from '../../src/lock/owner-context.js';
import { LockLostError, LockTimeoutError, NotLockOwnerError } from '../../src/lock/errors.js';
import type { LockClientOptions } from '../../src/lock/lock-client.js';
import { type BackendRecipe, HolderProcess } from './support/holder-process.js';

export interface LockHarness {
  /** A new client with connections of its own, as another process would have. */
  create(options?: LockClientOptions): DistributedLock;
  /** How a child process builds the same backend. */
  recipe: BackendRecipe;
  /** Deletes the lock behind its holder's back, as an operator or a failover that lost it would. */
  steal(key: string): Promise<void>;
  /** Stops and restarts the store (a Redis without persistence comes back empty; the others keep their data). */
  restartStore(): Promise<void>;
  teardown(): Promise<void>;
}

export interface LockTraits {
  /** Short lease for the expiry tests (ZooKeeper: the session timeout the test server allows). */
  ttlMs: number;
  /** The lease is a TTL that runs out without renewal (every backend but ZooKeeper, whose lease is the session). */
  ttlLease: boolean;
}

async function retryFor<T>(ms: number, attempt: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(200);
    }
  }
}

let keys = 0;
const freshKey = (label: string) =>
  `contract-${label}-${Date.now().toString(36)}-${++keys}-${Math.random().toString(36).slice(2, 6)}`;

/** One contract, run once per backend: every backend must behave the same through the DistributedLock interface. */
export function describeLockContract(name: string, traits: LockTraits, setup: () => Promise<LockHarness>): void {
  describe(`lock contract: ${name}`, () => {
    let harness: LockHarness;
    let lock: DistributedLock;
    let rival: DistributedLock;
    const ttlMs = traits.ttlMs;

    beforeAll(async () => {
      harness = await setup();
      lock = harness.create({ ttlMs, waitMs: 2_000 });
      rival = harness.create({ ttlMs, waitMs: 2_000 });
    });
    afterAll(async () => {
      await lock?.close();
      await rival?.close();
      await harness?.teardown();
    });

    it('grants one owner at a time and issues a larger fencing token on every acquisition', async () => {
      const key = freshKey('basic');
      const first = (await lock.tryAcquire(key))!;
      expect(first).not.toBeNull();
      expect(first.depth).toBe(1);
      expect(await rival.tryAcquire(key)).toBeNull();
      expect(await lock.tryAcquire(key)).toBeNull(); // outside an owner scope every acquisition is its own owner
      await lock.release(first);
      let previous = first.fence;
      for (let i = 0; i < 10; i++) {
        const client = i % 2 ? lock : rival;
        const lease = (await client.tryAcquire(key))!;
        expect(lease.fence).toBeGreaterThan(previous);
        previous = lease.fence;
        await client.release(lease);
      }
    });

    it('lets one owner re-enter: same token, count up, released only when the count returns to 0', async () => {
      const key = freshKey('reentrant');
      const depths: number[] = [];
      await lock.using(key, async (outer) => {
        depths.push(outer.depth);
        await lock.using(key, async (middle) => {
          depths.push(middle.depth);
          expect(middle.fence).toBe(outer.fence);
          const inner = await lock.acquire(key);
          depths.push(inner.depth);
          expect(inner.fence).toBe(outer.fence);
          await lock.release(inner);
          expect(await rival.tryAcquire(key)).toBeNull();
        });
        // The middle hold is gone, the outer one is not.
        expect(await rival.tryAcquire(key)).toBeNull();
      });
      expect(depths).toEqual([1, 2, 3]);
      const after = (await rival.tryAcquire(key))!;
      expect(after).not.toBeNull();
      await rival.release(after);
    });

    it('releases nested holds in any order and only frees the lock with the last', async () => {
      const key = freshKey('order');
      await runAsLockOwner(async () => {
        const a = await lock.acquire(key);
        const b = await lock.acquire(key);
        const c = await lock.acquire(key);
        await lock.release(a);
        await lock.release(c);
        expect(await rival.tryAcquire(key)).toBeNull();
        await lock.release(b);
      });
      const after = (await rival.tryAcquire(key))!;
      expect(after).not.toBeNull();
      await rival.release(after);
    });

    it("refuses a foreign owner's release with a clear error and changes nothing", async () => {
      const key = freshKey('foreign');
      let lease!: LockLease;
      await runAsLockOwner(async () => {
        lease = await lock.acquire(key);
      });
      await runAsLockOwner(async () => {
        await expect(lock.release(lease)).rejects.toBeInstanceOf(NotLockOwnerError);
      });
      await expect(rival.release(lease)).rejects.toBeInstanceOf(NotLockOwnerError);
      expect(await rival.tryAcquire(key)).toBeNull();
      expect(lease.signal.aborted).toBe(false);
      await expect(lock.release(lease)).rejects.toBeInstanceOf(NotLockOwnerError); // released from outside its scope
    });

    it('refuses the release of a lease that was lost, leaving the new holder in place', async () => {
      const key = freshKey('stale');
      const stale = (await lock.tryAcquire(key, { watchdog: false }))!;
      await harness.steal(key);
      const fresh = (await rival.tryAcquire(key))!;
      expect(fresh).not.toBeNull();
      expect(fresh.fence).toBeGreaterThan(stale.fence);
      await expect(lock.release(stale)).rejects.toBeInstanceOf(NotLockOwnerError);
      expect(await lock.tryAcquire(key)).toBeNull();
      await rival.release(fresh);
    });

    it('tries several keys at once and releases them together; a foreign lease among them changes nothing', async () => {
      const [a, b, c] = ['many-a', 'many-b', 'many-c'].map(freshKey) as [string, string, string];
      const taken = (await rival.tryAcquire(b))!;
      const [leaseA, leaseB, leaseC] = await lock.tryAcquireMany([a, b, c]);
      expect(leaseA?.key).toBe(a);
      expect(leaseB).toBeNull();
      expect(leaseC?.key).toBe(c);
      expect(await rival.tryAcquire(a)).toBeNull();
      expect(await rival.tryAcquire(c)).toBeNull();

      await expect(lock.tryReleaseMany([leaseA!, taken])).rejects.toBeInstanceOf(NotLockOwnerError);
      expect(await rival.tryAcquire(a)).toBeNull();
      expect(await lock.tryReleaseMany([leaseA!, leaseC!])).toEqual([true, true]);

      const again = await rival.tryAcquireMany([a, c]);
      expect(again[0]!.fence).toBeGreaterThan(leaseA!.fence);
      expect(again[1]!.fence).toBeGreaterThan(leaseC!.fence);
      expect(await rival.tryReleaseMany([again[0]!, again[1]!, taken])).toEqual([true, true, true]);

      // A lease lost meanwhile answers false; the others are released all the same.
      const [lost, kept] = (await lock.tryAcquireMany([a, c], { watchdog: false })) as [LockLease, LockLease];
      await harness.steal(a);
      expect(await lock.tryReleaseMany([lost, kept])).toEqual([false, true]);
      const free = await rival.tryAcquireMany([a, b, c]);
      expect(free.every((lease) => lease !== null)).toBe(true);
      await rival.tryReleaseMany(free as LockLease[]);
    });

    it('takes held locks again in one step, under a new token, where it can; the others stay held', async () => {
      const [a, b, c] = ['retake-a', 'retake-b', 'retake-c'].map(freshKey) as [string, string, string];
      const leases = (await lock.tryAcquireMany([a, b, c], { watchdog: false })) as [LockLease, LockLease, LockLease];
      const [leaseA, leaseB, leaseC] = leases;
      // b: another owner tried to take it meanwhile, so it is theirs to have next; c: lost behind its holder's back.
      expect(await rival.tryAcquire(b)).toBeNull();
      await harness.steal(c);
      const [againA, againB, againC] = await lock.retakeMany(leases);
      expect(againB).toBeNull();
      expect(againC).toBeNull();
      if (lock.capabilities.retakes) {
        expect(againA!.key).toBe(a);
        expect(againA!.fence).toBeGreaterThan(leaseA.fence);
        expect(againA!.previousFence).toBe(leaseA.fence);
        expect(await rival.tryAcquire(a)).toBeNull();
        // The old lease ended with the step: releasing it again changes nothing.
        await expect(lock.release(leaseA)).rejects.toBeInstanceOf(NotLockOwnerError);
        expect(await rival.tryAcquire(a)).toBeNull();
      } else {
        expect(againA).toBeNull();
      }
      expect(await lock.tryReleaseMany([againA ?? leaseA, leaseB, leaseC])).toEqual([true, true, false]);
      const next = (await rival.tryAcquireMany([a, b])) as [LockLease, LockLease];
      expect(next[0].fence).toBeGreaterThan((againA ?? leaseA).fence);
      expect(next[1].fence).toBeGreaterThan(leaseB.fence);
      await rival.tryReleaseMany(next);
    });

    it('keeps the lock past several leases with the watchdog, and stops renewing on release', async () => {
      const key = freshKey('watchdog');
      const lease = (await lock.tryAcquire(key))!;
      await sleep(ttlMs * 3.5);
      expect(lease.signal.aborted).toBe(false);
      expect(await rival.tryAcquire(key)).toBeNull();
      await lock.release(lease);
      const taken = (await rival.tryAcquire(key))!;
      expect(taken).not.toBeNull();
      // A watchdog still running would find the lock in other hands and fire the old lease's signal.
      await sleep(ttlMs);
      expect(lease.signal.aborted).toBe(false);
      await rival.release(taken);
    });

    if (traits.ttlLease) {
      it('lets a lease without watchdog expire after its TTL, and then fires its signal', async () => {
        const key = freshKey('expire');
        const lease = (await lock.tryAcquire(key, { watchdog: false }))!;
        expect(await rival.tryAcquire(key)).toBeNull();
        expect(lease.lost).toBe(false);
        await sleep(ttlMs + 100);
        expect(lease.lost).toBe(true);
        expect(lease.signal.aborted).toBe(true);
        const next = (await rival.tryAcquire(key))!;
        expect(next).not.toBeNull();
        expect(next.fence).toBeGreaterThan(lease.fence);
        await rival.release(next);
      });
    }

    it('fires the lease signal with LockLostError when the watchdog finds the lock gone', async () => {
      const key = freshKey('lost');
      const lease = (await lock.tryAcquire(key))!;
      const lost = new Promise<unknown>((resolve) =>
        lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)),
      );
      const stolenAt = Date.now();
      await harness.steal(key);
      const reason = await lost;
      expect(reason).toBeInstanceOf(LockLostError);
      expect(lease.lost).toBe(true);
      expect(Date.now() - stolenAt).toBeLessThan(ttlMs + 1_000);
      await expect(lock.release(lease)).rejects.toBeInstanceOf(NotLockOwnerError);
    });

    it('lets a waiter proceed once a killed holder’s lease runs out', async () => {
      const key = freshKey('killed');
      const holder = await HolderProcess.start(harness.recipe, key, ttlMs);
      expect(await lock.tryAcquire(key)).toBeNull();
      const killedAt = Date.now();
      await holder.kill();
      const lease = await lock.acquire(key, { waitMs: ttlMs + 10_000 });
      const waited = Date.now() - killedAt;
      expect(lease.fence).toBeGreaterThan(holder.fence);
      expect(waited).toBeLessThan(ttlMs + 5_000);
      await lock.release(lease);
    });

    // A waiter is woken by the release (a notice, a watch) and, should that be lost, looks again by itself within a
    // second on every backend: it takes a freed lock within about a second, never at the end of its 10 s budget. The
    // bound is that second, not the notice's usual few milliseconds, so a busy machine does not fail it.
    it('wakes a waiter within a second of the release, long before its wait budget', async () => {
      const key = freshKey('wake');
      const held = (await rival.tryAcquire(key))!;
      const waiting = lock.acquire(key, { waitMs: 10_000 }).then((lease) => ({ lease, at: Date.now() }));
      await sleep(300);
      const releasedAt = Date.now();
      await rival.release(held);
      const { lease, at } = await waiting;
      expect(at - releasedAt).toBeLessThan(1_000);
      await lock.release(lease);
    });

    it('gives up after the wait budget with LockTimeoutError, and on abort with the signal’s reason', async () => {
      const key = freshKey('budget');
      const held = (await rival.tryAcquire(key))!;
      const started = Date.now();
      await expect(lock.acquire(key, { waitMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      expect(Date.now() - started).toBeLessThan(3_000);
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error('caller gave up')), 100);
      await expect(lock.acquire(key, { waitMs: 10_000, signal: controller.signal })).rejects.toThrow('caller gave up');
      await rival.release(held);
      // Neither abandoned wait left anything behind that blocks the lock.
      const lease = (await lock.tryAcquire(key))!;
      expect(lease).not.toBeNull();
      await lock.release(lease);
    });

    it('keeps critical sections mutually exclusive under contention from several clients', async () => {
      const key = freshKey('mutex');
      const clients = [lock, rival, harness.create({ ttlMs, waitMs: 20_000 })];
      let inside = 0;
      let overlaps = 0;
      let sections = 0;
      const fences: number[] = [];
      await Promise.all(
        Array.from({ length: 9 }, async (_, worker) => {
          const client = clients[worker % clients.length]!;
          for (let i = 0; i < 4; i++) {
            await client.using(
              key,
              async (lease) => {
                if (++inside > 1) overlaps++;
                fences.push(lease.fence);
                await sleep(2);
                sections++;
                inside--;
              },
              { waitMs: 20_000 },
            );
          }
        }),
      );
      await clients[2]!.close();
      expect(overlaps).toBe(0);
      expect(sections).toBe(36);
      for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!);
    });

    it('returns what `using` ran and releases on success and on failure', async () => {
      const key = freshKey('using');
      expect(await lock.using(key, async (lease) => lease.depth)).toBe(1);
      await expect(lock.using(key, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
      const lease = (await rival.tryAcquire(key))!;
      expect(lease).not.toBeNull();
      await rival.release(lease);
    });

    it('keeps fencing tokens increasing across a restart of the store', async () => {
      const key = freshKey('restart');
      const before = (await lock.tryAcquire(key))!;
      await lock.release(before);
      await harness.restartStore();
      // The client's connections notice the restart on their first call: retry until they are back.
      const after = await retryFor(20_000, () => lock.acquire(key, { waitMs: 20_000 }));
      expect(after.fence).toBeGreaterThan(before.fence);
      await lock.release(after);
    });
  });
}
