import { posix } from 'node:path';
import * as zookeeper from 'node-zookeeper-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperServer, zookeeperMissing } from '../support/servers/index.js';
import { ZooKeeperLock } from '../../src/lock/backends/zookeeper.js';
import { LockLostError } from '../../src/lock/errors.js';
import { waitFor } from '../support/wait-for.js';
import { describeLockContract } from './contract.js';

const missing = zookeeperMissing();
// CI installs ZooKeeper (.ci/run): there a missing server is a failure, never a silent skip.
if (missing && process.env.CI) throw new Error(`ZooKeeper lock tests cannot run: ${missing}`);
if (missing) console.warn(`SKIPPING the ZooKeeper lock tests: ${missing}`);

const SESSION_MS = 1_000;
const ROOT = '/stock-locks';
// The cases crash the server and bring it back: its `stop()` is a SIGKILL.
const crashable = { stopMode: 'immediate' } as const;

/** A plain client for the test's own inspections; a first connection to a fresh server is occasionally never answered. */
async function adminClient(connect: string): Promise<zookeeper.Client> {
  for (let attempt = 1; ; attempt++) {
    const client = zookeeper.createClient(connect, { sessionTimeout: 10_000, retries: 2 });
    const connected = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 5_000);
      client.once('connected', () => {
        clearTimeout(timer);
        resolve(true);
      });
      client.connect();
    });
    if (connected) return client;
    client.close();
    if (attempt === 5) throw new Error(`no ZooKeeper session at ${connect}`);
  }
}

const call = <T>(start: (done: (error: Error | zookeeper.Exception | null, value?: T) => void) => void) =>
  new Promise<T>((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value as T))));

async function removeChildren(admin: zookeeper.Client, key: string): Promise<void> {
  const dir = posix.join(ROOT, encodeURIComponent(key));
  const children = await call<string[]>((done) => admin.getChildren(dir, (error, names) => done(error, names)));
  for (const child of children) await call((done) => admin.remove(posix.join(dir, child), -1, done));
}

describe.skipIf(missing !== undefined)('zookeeper', () => {
  describeLockContract('zookeeper', { ttlMs: SESSION_MS, ttlLease: false }, async () => {
    const server = await ZooKeeperServer.start(crashable);
    const admin = await adminClient(server.connect);
    return {
      create: (options) =>
        new ZooKeeperLock({ ...options, connect: server.connect, sessionTimeoutMs: options?.ttlMs ?? SESSION_MS }),
      recipe: {
        module: 'dist/src/lock/backends/zookeeper.js',
        className: 'ZooKeeperLock',
        options: { connect: server.connect, sessionTimeoutMs: SESSION_MS },
      },
      steal: (key) => removeChildren(admin, key),
      restartStore: async () => {
        await server.stop();
        await server.resume();
      },
      teardown: async () => {
        admin.close();
        await server.destroy();
      },
    };
  });

  describe('zookeeper lock: sequential nodes and sessions', () => {
    let server: ZooKeeperServer;
    let admin: zookeeper.Client;
    beforeAll(async () => {
      server = await ZooKeeperServer.start(crashable);
      admin = await adminClient(server.connect);
    });
    afterAll(async () => {
      admin?.close();
      await server?.destroy();
    });

    const children = (key: string) =>
      call<string[]>((done) =>
        admin.getChildren(posix.join(ROOT, encodeURIComponent(key)), (error, names) => done(error, names)),
      );

    it('queues contenders as ephemeral sequential nodes, in order, and removes each on release', async () => {
      const key = `zk-queue-${Date.now()}`;
      const clients = Array.from(
        { length: 3 },
        () => new ZooKeeperLock({ connect: server.connect, sessionTimeoutMs: 2_000 }),
      );
      const first = (await clients[0]!.tryAcquire(key))!;
      const order: number[] = [];
      const waits: Promise<void>[] = [];
      for (const i of [1, 2]) {
        waits.push(
          clients[i]!.acquire(key, { waitMs: 10_000 }).then(async (lease) => {
            order.push(i);
            await clients[i]!.release(lease);
          }),
        );
        // Each contender's node is in the queue before the next sets out: arrival order, seen in ZooKeeper.
        const queued = async () => (await children(key)).length === i + 1;
        expect(await waitFor(queued, 10_000, 10)).toBeLessThan(Infinity);
      }
      expect((await children(key)).length).toBe(3);
      await clients[0]!.release(first);
      await Promise.all(waits);
      expect(order).toEqual([1, 2]);
      expect(await children(key)).toEqual([]);
      await Promise.all(clients.map((c) => c.close()));
    });

    it('fires the holder’s signal when its session expires, and the next in line proceeds', async () => {
      const key = `zk-expire-${Date.now()}`;
      const holder = new ZooKeeperLock({ connect: server.connect, sessionTimeoutMs: SESSION_MS });
      const waiter = new ZooKeeperLock({ connect: server.connect, sessionTimeoutMs: SESSION_MS });
      const lease = (await holder.tryAcquire(key))!;
      const lost = new Promise<unknown>((resolve) =>
        lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)),
      );
      const next = waiter.acquire(key, { waitMs: 30_000 });
      // The server goes away longer than the session lasts: the holder cannot prove it still holds the lock.
      await server.stop();
      expect(await lost).toBeInstanceOf(LockLostError);
      await server.resume();
      const taken = await next.catch(() => waiter.acquire(key, { waitMs: 30_000 }));
      expect(taken.fence).toBeGreaterThan(lease.fence);
      await waiter.release(taken);
      await Promise.all([holder.close(), waiter.close()]);
    });
  });
});
