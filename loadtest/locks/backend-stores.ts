import { Redis } from 'ioredis';
import { createDatabase } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { PostgresServer, RedisServer, ZooKeeperServer, zookeeperMissing } from '../../test/support/servers/index.js';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import { ZooKeeperLock } from '../../src/lock/backends/zookeeper.js';
import type { DistributedLock, LockBackendKind } from '../../src/lock/distributed-lock.js';
import { createLogger } from '../../src/logger.js';
import type { Contender } from './contenders.js';

export const backendKinds: LockBackendKind[] = ['redis', 'redlock', 'postgres', 'zookeeper'];

/** Private stores for the backend comparison: started for the run, gone after it. */
export class BackendStores {
  private constructor(
    private readonly stops: (() => Promise<void>)[],
    readonly redisUrl: string,
    /** Redlock's independent nodes: the benchmark may kill one to show what a dead node costs. */
    readonly lockNodes: RedisServer[],
    readonly databaseUrl: string | undefined,
    readonly zookeeperConnect: string | undefined,
  ) {}

  /** `withDatabase`: a Postgres even when no backend needs one (the order flow does). */
  static async start(kinds: LockBackendKind[], redisUrl: string, withDatabase = false): Promise<BackendStores> {
    const stops: (() => Promise<void>)[] = [];
    try {
      let lockNodes: RedisServer[] = [];
      if (kinds.includes('redlock')) {
        // Killed, not shut down, when the benchmark takes one away.
        const start = () => RedisServer.start({ stopMode: 'immediate' });
        lockNodes = await Promise.all([start(), start(), start()]);
        for (const node of lockNodes) stops.push(() => node.destroy());
      }
      let databaseUrl: string | undefined;
      if (kinds.includes('postgres') || withDatabase) {
        // Configured as the service's embedded default: default durability, room for 300 connections.
        const postgres = await PostgresServer.start({ maxConnections: 300 });
        stops.push(() => postgres.destroy());
        const db = createDatabase(postgres.url, 1);
        await migrateToLatest(db, createLogger('warn')).finally(() => db.destroy());
        databaseUrl = postgres.url;
      }
      let zookeeperConnect: string | undefined;
      if (kinds.includes('zookeeper')) {
        const missing = zookeeperMissing();
        if (missing) throw new Error(`cannot compare the zookeeper backend: ${missing}`);
        const zookeeper = await ZooKeeperServer.start();
        stops.push(() => zookeeper.destroy());
        zookeeperConnect = zookeeper.connect;
      }
      return new BackendStores(stops, redisUrl, lockNodes, databaseUrl, zookeeperConnect);
    } catch (error) {
      await Promise.allSettled(stops.map((stop) => stop()));
      throw error;
    }
  }

  get lockNodeUrls(): string[] {
    return this.lockNodes.map((node) => node.url);
  }

  /** `this lock` on one backend, with the service's defaults (10 s lease, watchdog on). */
  contender(kind: LockBackendKind, runId: string): Contender {
    let lock: DistributedLock;
    switch (kind) {
      case 'redis':
        lock = new RedisLock({ redis: new Redis(this.redisUrl), ownsConnection: true });
        break;
      case 'redlock':
        lock = new RedlockLock({ urls: this.lockNodeUrls });
        break;
      case 'postgres':
        lock = new PostgresLock({ connectionString: this.databaseUrl!, poolSize: 10 });
        break;
      case 'zookeeper':
        lock = new ZooKeeperLock({ connect: this.zookeeperConnect!, rootPath: `/bench-${runId}` });
        break;
    }
    return {
      name: `backend:${kind}`,
      async acquire(key, stop) {
        const lease = await lock.acquire(`${runId}/${key}`, { waitMs: 600_000, signal: stop });
        return () => lock.release(lease);
      },
      close: () => lock.close(),
    };
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.stops.reverse().map((stop) => stop()));
  }
}
