import type { RedisClient } from '../redis/connections.js';
import { PostgresLock } from './backends/postgres.js';
import { RedisLock } from './backends/redis.js';
import { RedlockLock } from './backends/redlock.js';
import { ZooKeeperLock } from './backends/zookeeper.js';
import type { DistributedLock, LockBackendKind } from './distributed-lock.js';
import type { ReleaseNotices } from './release-notices.js';

export interface LockSettings {
  lockBackend: LockBackendKind;
  /** Redlock's independent nodes (REDIS_LOCK_URLS). */
  redisLockUrls: readonly string[];
  /** ZooKeeper's `host:port` list (ZOOKEEPER_CONNECT). */
  zookeeperConnect: string | undefined;
  lockTtlMs: number;
  lockWaitMs: number;
  lockWatchdog: boolean;
}

export interface LockStores {
  /** The service's Redis connection (the `redis` backend shares it). */
  redis: RedisClient;
  /** The service's own database (the `postgres` backend opens a small pool of its own on it). */
  databaseUrl: string;
  /** The process's release notices, where every backend's waiters hear of releases by other processes. */
  notices: ReleaseNotices;
}

/** The backend LOCK_BACKEND selects. */
export function createLockBackend(settings: LockSettings, stores: LockStores): DistributedLock {
  const common = {
    ttlMs: settings.lockTtlMs,
    waitMs: settings.lockWaitMs,
    watchdog: settings.lockWatchdog,
    notices: stores.notices,
  };
  switch (settings.lockBackend) {
    case 'redis':
      return new RedisLock({ ...common, redis: stores.redis });
    case 'redlock':
      return new RedlockLock({ ...common, urls: [...settings.redisLockUrls] });
    case 'postgres':
      return new PostgresLock({ ...common, connectionString: stores.databaseUrl });
    case 'zookeeper':
      if (!settings.zookeeperConnect) throw new Error('LOCK_BACKEND=zookeeper needs ZOOKEEPER_CONNECT');
      return new ZooKeeperLock({ ...common, connect: settings.zookeeperConnect });
  }
}
