import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import type { LockLease } from '../../src/lock/distributed-lock.js';
import { redisKeys } from '../../src/lock/keys.js';
import { waitFor } from '../support/wait-for.js';
import { describeLockContract } from './contract.js';

describeLockContract('redis', { ttlMs: 600, ttlLease: true }, async () => {
  // restartStore crashes it: `stop()` is a SIGKILL.
  const server = await RedisServer.start({ stopMode: 'immediate' });
  const admin = new Redis(server.url);
  const connections: Redis[] = [admin];
  return {
    create: (options) => {
      const redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
      connections.push(redis);
      return new RedisLock({ ...options, redis, ownsConnection: true });
    },
    recipe: { module: 'dist/src/lock/backends/redis.js', className: 'RedisLock', options: {}, redisUrl: server.url },
    steal: async (key) => void (await admin.del(redisKeys.lock(key))),
    restartStore: async () => {
      await server.stop();
      await server.resume();
    },
    teardown: async () => {
      for (const connection of connections) connection.disconnect();
      await server.destroy();
    },
  };
});

describe('redis lock: fair queue and waiting across clients', () => {
  let server: RedisServer;
  let admin: Redis;
  let n = 0;
  const name = () => `lock-${++n}-${Math.random().toString(36).slice(2, 8)}`;
  const client = () => new RedisLock({ redis: new Redis(server.url), ownsConnection: true });
  /** Fair waiters queued in Redis for the lock. */
  const queued = (lock: string) => admin.zcard(redisKeys.scriptKeys(lock)[2]);
  /** Waits until `ready` holds in Redis (observable state, not a guess at how long a round trip takes). */
  const until = async (ready: () => Promise<boolean>) => expect(await waitFor(ready, 10_000, 5)).toBeLessThan(Infinity);

  beforeAll(async () => {
    server = await RedisServer.start();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin.disconnect();
    await server.destroy();
  });

  it('serves fair waiters from several clients in arrival order', async () => {
    const lock = name();
    const holder = client();
    const clients = Array.from({ length: 4 }, client);
    const held = (await holder.tryAcquire(lock))!;
    const order: number[] = [];
    const waits = [];
    for (let i = 0; i < 8; i++) {
      waits.push(
        clients[i % clients.length]!.using(
          lock,
          async () => {
            order.push(i);
            await sleep(5);
          },
          { fair: true, waitMs: 10_000 },
        ),
      );
      // Arrival order is what fairness promises: each joins the queue in Redis before the next sets out.
      await until(async () => (await queued(lock)) === i + 1);
    }
    await holder.release(held);
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    await Promise.all([holder, ...clients].map((c) => c.close()));
  });

  it('passes a hand-off on when the waiter it was meant for gives up', async () => {
    const lock = name();
    const a = client();
    const b = client();
    const held = (await a.tryAcquire(lock))!;
    let quit = false;
    const quitter = b.acquire(lock, { fair: true, waitMs: 200 }).finally(() => (quit = true));
    quitter.catch(() => {}); // asserted below; it may give up before that line is reached
    // In the queue before the patient one (or, on a machine slow enough, already gone after its 200 ms).
    await until(async () => quit || (await queued(lock)) === 1);
    const patient = a.acquire(lock, { fair: true, waitMs: 5_000 });
    await expect(quitter).rejects.toThrow(/wait budget/);
    await a.release(held);
    const lease = await patient;
    expect(lease.fence).toBeGreaterThan(held.fence);
    await a.release(lease);
    await Promise.all([a.close(), b.close()]);
  });

  it('serves the waiters of one client first come, first served', async () => {
    const lock = name();
    const local = client();
    const held = (await local.tryAcquire(lock))!;
    const order: number[] = [];
    const waits = Array.from({ length: 10 }, (_, i) =>
      local.using(lock, async () => void order.push(i), { waitMs: 10_000 }),
    );
    await sleep(50);
    await local.release(held);
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    await local.close();
  });

  it('passes the lock among the waiters of one client with consecutive tokens, then frees it for other clients', async () => {
    const lock = name();
    const local = new RedisLock({ redis: new Redis(server.url), ownsConnection: true, maxLocalHandoffs: 4 });
    const remote = client();
    const fences: number[] = [];
    // A waiting acquisition starts a tenure with reserved tokens (a single attempt reserves none: it has no waiters).
    const first = await local.acquire(lock);
    fences.push(first.fence);
    // Twenty local waiters and one other process queue up behind the holder.
    const locals = Array.from({ length: 20 }, () =>
      local.using(lock, async (lease) => void fences.push(lease.fence), { waitMs: 10_000 }),
    );
    let remoteFence = 0;
    const other = remote.using(
      lock,
      async (lease) => {
        remoteFence = lease.fence;
        fences.push(lease.fence);
      },
      { waitMs: 10_000 },
    );
    // The other process has tried the lock (its failed attempt marks it contended), so the release will know.
    await until(async () => (await admin.hget(redisKeys.lock(lock), 'contended')) === '1');
    await local.release(first);
    await Promise.all([...locals, other]);
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!);
    // The first tenure: the holder and four hand-overs with the next reserved tokens, no Redis round trip between them.
    expect(fences.slice(0, 5)).toEqual([0, 1, 2, 3, 4].map((i) => first.fence + i));
    // After four hand-overs the lock was freed in Redis, and this client held back: the other process got it next.
    expect(fences.indexOf(remoteFence)).toBe(5);
    expect(remoteFence).toBeGreaterThan(first.fence + 4);
    await Promise.all([local.close(), remote.close()]);
  });

  it('asks Redis only to start and end each tenure while the waiters of one client pass the lock along', async () => {
    const lock = name();
    const local = new RedisLock({ redis: new Redis(server.url), ownsConnection: true, maxLocalHandoffs: 4 });
    const scriptCalls = async () => {
      const stats = await admin.info('commandstats');
      return [...stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    };
    const first = await local.acquire(lock);
    const before = await scriptCalls();
    let sections = 1;
    const waiters = Array.from({ length: 20 }, () =>
      local.using(lock, async () => void sections++, { waitMs: 10_000 }),
    );
    // Every waiter is in line before the holder lets go.
    await sleep(50);
    await local.release(first);
    await Promise.all(waiters);
    expect(sections).toBe(21);
    // Tenures of five holds (one taken, four handed on): each costs one take and one release, and the first's take
    // came before the count. A waiter that asked Redis while the lock was passed along here would add calls.
    const tenures = Math.ceil(21 / 5);
    expect((await scriptCalls()) - before).toBe(2 * tenures - 1);
    await local.close();
  });

  it('keeps a lock handed to a waiter whose wait was aborted in the same moment: the next waiter gets it', async () => {
    const lock = name();
    const local = new RedisLock({ redis: new Redis(server.url), ownsConnection: true, ttlMs: 10_000 });
    const first = await local.acquire(lock);
    const stop = new AbortController();
    const aborted = local.acquire(lock, { waitMs: 10_000, signal: stop.signal });
    const next = local.acquire(lock, { waitMs: 2_000 });
    await sleep(50);
    // The abort rejects the first waiter's sleep; the release, in the same tick, hands it the lock before it wakes.
    stop.abort(new Error('caller gave up'));
    const released = local.release(first);
    // The hand-off reached the aborted waiter first (the race this test is about), and it kept the lock.
    const handedTo = await aborted;
    await local.release(handedTo);
    await released;
    const lease = await next;
    expect(lease.fence).toBeGreaterThan(first.fence);
    await local.release(lease);
    await local.close();
  });

  it('takes and releases many locks in one script call each, a contended or queued one among them', async () => {
    const admin = new Redis(server.url);
    const lock = new RedisLock({ redis: new Redis(server.url), ownsConnection: true });
    const rival = client();
    const scriptCalls = async () => {
      const stats = await admin.info('commandstats');
      const calls = (command: string) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
      return calls('evalsha') + calls('eval');
    };
    // Load the scripts once: a first call may need EVALSHA and then EVAL.
    await lock.tryReleaseMany((await lock.tryAcquireMany([name(), name()])) as LockLease[]);

    const keys = Array.from({ length: 5 }, name);
    let before = await scriptCalls();
    const leases = (await lock.tryAcquireMany(keys)) as LockLease[];
    expect(leases.every((lease) => lease !== null)).toBe(true);
    expect((await scriptCalls()) - before).toBe(1);
    before = await scriptCalls();
    expect(await lock.tryReleaseMany(leases)).toEqual([true, true, true, true, true]);
    expect((await scriptCalls()) - before).toBe(1);

    // Contended (another client tried it) and queued for (a fair waiter): the same call publishes the release notice
    // of the one and hands the other to the queue's head.
    const [contended, queued, plain] = (await lock.tryAcquireMany(keys.slice(0, 3))) as LockLease[];
    expect(await rival.tryAcquire(contended!.key)).toBeNull();
    const waiter = rival.acquire(queued!.key, { fair: true, waitMs: 10_000 });
    const queueKey = redisKeys.scriptKeys(queued!.key)[2];
    expect(await waitFor(async () => (await admin.exists(queueKey)) === 1, 10_000)).toBeLessThan(Infinity);
    const notices = new Redis(server.url);
    const heard = new Promise<string>((resolve) => notices.on('smessage', (channel: string) => resolve(channel)));
    await notices.ssubscribe(redisKeys.releasedChannel(contended!.key));
    before = await scriptCalls();
    expect(await lock.tryReleaseMany([contended!, queued!, plain!])).toEqual([true, true, true]);
    expect((await scriptCalls()) - before).toBe(1);
    expect(await heard).toBe(redisKeys.releasedChannel(contended!.key));
    const handed = await waiter;
    expect(handed.fence).toBeGreaterThan(queued!.fence);
    await rival.release(handed);
    notices.disconnect();
    admin.disconnect();
    await Promise.all([lock.close(), rival.close()]);
  });
});
