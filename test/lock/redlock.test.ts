import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import { LockUnavailableError } from '../../src/lock/errors.js';
import { redisKeys } from '../../src/lock/keys.js';
import { waitFor } from '../support/wait-for.js';
import { describeLockContract } from './contract.js';

// The cases crash nodes and bring them back: their `stop()` is a SIGKILL.
const crashable = { stopMode: 'immediate' } as const;

describeLockContract('redlock (3 nodes)', { ttlMs: 600, ttlLease: true }, async () => {
  const nodes = await Promise.all([
    RedisServer.start(crashable),
    RedisServer.start(crashable),
    RedisServer.start(crashable),
  ]);
  const admins = nodes.map((node) => new Redis(node.url));
  const urls = nodes.map((node) => node.url);
  return {
    create: (options) => new RedlockLock({ ...options, urls }),
    recipe: { module: 'dist/src/lock/backends/redlock.js', className: 'RedlockLock', options: { urls } },
    steal: async (key) => {
      await Promise.all(admins.map((admin) => admin.del(redisKeys.lock(key))));
    },
    restartStore: async () => {
      for (const node of nodes) {
        await node.stop();
        await node.resume();
      }
    },
    teardown: async () => {
      for (const admin of admins) admin.disconnect();
      await Promise.all(nodes.map((node) => node.destroy()));
    },
  };
});

describe('redlock: quorum', () => {
  let nodes: RedisServer[];
  let admins: Redis[];
  let lock: RedlockLock;
  beforeAll(async () => {
    nodes = await Promise.all([
      RedisServer.start(crashable),
      RedisServer.start(crashable),
      RedisServer.start(crashable),
    ]);
    admins = nodes.map((node) => new Redis(node.url, { maxRetriesPerRequest: 1 }));
    for (const admin of admins) admin.on('error', () => {});
    lock = new RedlockLock({ urls: nodes.map((n) => n.url), ttlMs: 5_000, nodeTimeoutMs: 200 });
  });
  afterAll(async () => {
    await lock.close();
    for (const admin of admins) admin.disconnect();
    await Promise.all(nodes.map((node) => node.destroy()));
  });

  it('records the chosen token on every granting node and releases on all of them', async () => {
    const key = `quorum-all-${Date.now()}`;
    const lease = (await lock.tryAcquire(key))!;
    // The attempt is decided once a majority granted; the chosen token is recorded on that majority.
    const recorded = await Promise.all(admins.map((admin) => admin.hget(redisKeys.lock(key), 'fence')));
    expect(recorded.filter((fence) => fence === String(lease.fence)).length).toBeGreaterThanOrEqual(lock.quorum);
    const counters = await Promise.all(admins.map((admin) => admin.get(redisKeys.fence(key))));
    expect(counters.filter((counter) => Number(counter) >= lease.fence).length).toBeGreaterThanOrEqual(lock.quorum);
    await lock.release(lease);
    // The release, too, returns once a majority answered; the last node follows at once.
    const allFree = async () => (await Promise.all(admins.map((a) => a.exists(redisKeys.lock(key))))).every((n) => !n);
    expect(await waitFor(allFree, 2_000)).toBeLessThan(2_000);
  });

  it('acquires with one of three nodes down and refuses, clearly, with two down', async () => {
    const key = `quorum-down-${Date.now()}`;
    await nodes[0]!.stop();
    const lease = (await lock.tryAcquire(key))!;
    expect(lease).not.toBeNull();
    await lock.release(lease);

    await nodes[1]!.stop();
    await expect(lock.tryAcquire(key)).rejects.toBeInstanceOf(LockUnavailableError);
    await expect(lock.acquire(key, { waitMs: 500 })).rejects.toBeInstanceOf(LockUnavailableError);

    await nodes[0]!.resume();
    await nodes[1]!.resume();
    // A node that is down fails at once: no attempt waits for it. Once the client has reconnected, the nodes
    // (which came back empty) grant again, with a larger token: it is floored by the clock.
    expect(await waitFor(() => lock.nodes.every((node) => node.status === 'ready'), 5_000)).toBeLessThan(5_000);
    const again = (await lock.tryAcquire(key))!;
    expect(again.fence).toBeGreaterThan(lease.fence);
    await lock.release(again);
  });

  it('does not grant a lock a majority holds for someone else, even if one node is free', async () => {
    const key = `quorum-split-${Date.now()}`;
    const other = new RedlockLock({ urls: nodes.map((n) => n.url), ttlMs: 5_000 });
    const held = (await other.tryAcquire(key))!;
    await admins[2]!.del(redisKeys.lock(key));
    expect(await lock.tryAcquire(key)).toBeNull();
    // The failed attempt left nothing behind on the free node.
    expect(await admins[2]!.exists(redisKeys.lock(key))).toBe(0);
    await other.release(held);
    await other.close();
  });
});
