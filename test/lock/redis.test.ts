import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import { LockScriptCode } from '../../src/lock/backends/redis-commands.js';
import { namedLockKeyspace } from '../../src/lock/backends/redis-keyspace.js';
import { defineLockCommands } from '../../src/lock/scripts.js';
import { describeLockContract } from './contract.js';

// The holder process builds its lock from JSON options, so the contract runs on the default keyspace.
const keyspace = namedLockKeyspace();

describeLockContract('redis', { ttlMs: 600, ttlLease: true }, async () => {
  // restartStore crashes it: `stop()` is a SIGKILL.
  const server = await RedisServer.start({ stopMode: 'immediate' });
  const admin = new Redis(server.url);
  const connections: Redis[] = [admin];
  return {
    create: (options) => {
      const redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
      connections.push(redis);
      return new RedisLock({ ...options, redis, keyspace, ownsConnection: true });
    },
    recipe: { module: 'dist/src/lock/backends/redis.js', className: 'RedisLock', options: {}, redisUrl: server.url },
    steal: async (key) => void (await admin.del(keyspace.lock(key))),
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

describe('redis lock: scripts and fair queue', () => {
  let server: RedisServer;
  let redis: Redis;
  let listener: Redis;
  const ks = namedLockKeyspace('scripts:');
  let n = 0;
  const name = () => `lock-${++n}-${Math.random().toString(36).slice(2, 8)}`;
  const keysOf = (lock: string) => [ks.lock(lock), ks.fence(lock), ks.queue(lock), ks.queueDeadlines(lock)] as const;
  const acquire = (lock: string, owner: string, mode: 'try' | 'queue' | 'poll' = 'try', ttl = 10_000) =>
    redis.lockAcquire(...keysOf(lock), owner, ttl, mode, 3_000, ks.grantChannel, lock);
  const release = (lock: string, owner: string, all: '0' | '1' = '0') =>
    redis.lockRelease(...keysOf(lock), owner, 10_000, ks.releaseNotice(lock).channel, lock, ks.grantChannel, lock, all);

  beforeAll(async () => {
    server = await RedisServer.start();
    redis = new Redis(server.url);
    listener = new Redis(server.url);
    defineLockCommands(redis);
  });
  afterAll(async () => {
    redis.disconnect();
    listener.disconnect();
    await server.destroy();
  });

  it('keeps owner, hold count and token in one hash; only the owner counts up and down', async () => {
    const lock = name();
    const [fence, count] = await acquire(lock, 'a');
    expect(count).toBe(1);
    expect(await acquire(lock, 'a')).toEqual([fence, 2, fence]);
    expect(await redis.hgetall(ks.lock(lock))).toEqual({ owner: 'a', count: '2', fence: String(fence) });
    expect((await acquire(lock, 'b'))[0]).toBe(LockScriptCode.Held);
    expect(await release(lock, 'b')).toEqual([LockScriptCode.NotOwner]);
    expect(await redis.hget(ks.lock(lock), 'count')).toBe('2');
    expect(await release(lock, 'a')).toEqual([1]);
    expect(await release(lock, 'a')).toEqual([0, 1]); // 'b' tried meanwhile
    expect(await redis.exists(ks.lock(lock))).toBe(0);
  });

  it('issues tokens from the clock when the counter is gone, above every earlier one', async () => {
    const lock = name();
    const [first] = await acquire(lock, 'a');
    await release(lock, 'a');
    await redis.del(ks.fence(lock));
    const [second] = await acquire(lock, 'b');
    expect(second).toBeGreaterThan(first);
    const micros = Number((await redis.time())[0]) * 1e6;
    expect(second).toBeGreaterThan(micros - 5e6);
  });

  it('hands a released lock to the head of the queue and tells it; nobody overtakes the queue', async () => {
    const lock = name();
    await acquire(lock, 'holder');
    expect((await acquire(lock, 'w1', 'queue'))[0]).toBe(LockScriptCode.Held);
    expect((await acquire(lock, 'w2', 'queue'))[0]).toBe(LockScriptCode.Held);
    await listener.subscribe(ks.grantChannel);
    const notice = new Promise<string>((resolve) =>
      listener.once('message', (_channel, message: string) => resolve(message)),
    );
    const reply = await release(lock, 'holder');
    expect(reply[0]).toBe(0);
    expect(reply[1]).toBe('w1');
    expect(await notice).toBe(`w1\n${reply[2]}\n10000\n${lock}`);
    await listener.unsubscribe(ks.grantChannel);
    // A newcomer's try is refused even though w2 is only queued, not holding.
    expect((await acquire(lock, 'newcomer'))[0]).toBe(LockScriptCode.Held);
    expect(await acquire(lock, 'w1', 'poll')).toEqual([reply[2], 1, reply[2]]);
    const next = await release(lock, 'w1');
    expect(next[1]).toBe('w2');
    expect(next[2]).toBeGreaterThan(reply[2]!);
  });

  it('drops a waiter that stopped polling from the queue', async () => {
    const lock = name();
    await acquire(lock, 'holder');
    await redis.lockAcquire(...keysOf(lock), 'ghost', 10_000, 'queue', 50, ks.grantChannel, lock);
    await acquire(lock, 'alive', 'queue');
    await sleep(80);
    expect((await release(lock, 'holder'))[1]).toBe('alive');
  });

  it('serves fair waiters from several clients in arrival order', async () => {
    const lock = name();
    const holder = new RedisLock({ redis: new Redis(server.url), keyspace: ks, ownsConnection: true });
    const clients = Array.from(
      { length: 4 },
      () => new RedisLock({ redis: new Redis(server.url), keyspace: ks, ownsConnection: true }),
    );
    const held = (await holder.tryAcquire(lock))!;
    const order: number[] = [];
    const waits = [];
    for (let i = 0; i < 8; i++) {
      const client = clients[i % clients.length]!;
      waits.push(
        client.using(
          lock,
          async () => {
            order.push(i);
            await sleep(5);
          },
          { fair: true, waitMs: 10_000 },
        ),
      );
      await sleep(30); // arrival order is what fairness promises: let each join the queue before the next
    }
    await holder.release(held);
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    await Promise.all([holder, ...clients].map((c) => c.close()));
  });

  it('passes a hand-off on when the waiter it was meant for gives up', async () => {
    const lock = name();
    const a = new RedisLock({ redis: new Redis(server.url), keyspace: ks, ownsConnection: true });
    const b = new RedisLock({ redis: new Redis(server.url), keyspace: ks, ownsConnection: true });
    const held = (await a.tryAcquire(lock))!;
    const quitter = b.acquire(lock, { fair: true, waitMs: 200 });
    await sleep(20);
    const patient = a.acquire(lock, { fair: true, waitMs: 5_000 });
    await expect(quitter).rejects.toThrow(/wait budget/);
    await a.release(held);
    const lease = await patient;
    expect(lease.fence).toBeGreaterThan(held.fence);
    await a.release(lease);
    await Promise.all([a.close(), b.close()]);
  });

  it('passes the lock among the waiters of one client with consecutive tokens, then frees it for other clients', async () => {
    const lock = name();
    const local = new RedisLock({
      redis: new Redis(server.url),
      keyspace: ks,
      ownsConnection: true,
      maxLocalHandoffs: 4,
    });
    const remote = new RedisLock({ redis: new Redis(server.url), keyspace: ks, ownsConnection: true });
    const fences: number[] = [];
    const first = (await local.tryAcquire(lock))!;
    fences.push(first.fence);
    // Twenty local waiters and one other process queue up behind the holder.
    const locals = Array.from({ length: 20 }, () =>
      local.using(
        lock,
        async (lease) => {
          fences.push(lease.fence);
        },
        { waitMs: 10_000 },
      ),
    );
    await sleep(50);
    let remoteFence = 0;
    const other = remote.using(
      lock,
      async (lease) => {
        remoteFence = lease.fence;
        fences.push(lease.fence);
      },
      { waitMs: 10_000 },
    );
    await sleep(50);
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
});
