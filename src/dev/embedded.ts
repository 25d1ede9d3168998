import path from 'node:path';
import type { Logger } from '../logger.js';
import { PostgresServer, RedisServer } from './servers/index.js';

export { DataDirInUseError, MissingDependencyError } from './servers/index.js';

/**
 * The embedded default, loaded (dynamically, by src/endpoints.ts) only when REDIS_URL or DATABASE_URL is unset: a
 * private redis-server and Postgres under DATA_DIR. Each returns the server; the caller stops it.
 */

/**
 * redis-server under `<dataDir>/redis`, append-only file on, so that data survives restarts. Without redis-server
 * on the PATH this throws MissingDependencyError, whose message says how to get one.
 */
export async function startEmbeddedRedis(dataDir: string, log: Logger): Promise<RedisServer> {
  const redis = await RedisServer.start({ dir: path.join(dataDir, 'redis'), persistence: 'aof' });
  log.info({ port: redis.port, dir: redis.dir }, 'embedded redis-server started');
  return redis;
}

/**
 * Postgres under `<dataDir>/postgres`, default durability (fsync and synchronous commits on); data survives restarts.
 * pg_stat_statements is loaded, as managed Postgres services do by default: it is how an operator (and the load
 * test's per-order figures) sees which statements an order costs.
 */
export async function startEmbeddedPostgres(dataDir: string, log: Logger): Promise<PostgresServer> {
  const postgres = await PostgresServer.start({
    dir: path.join(dataDir, 'postgres'),
    maxConnections: 300,
    statementStatistics: true,
    log,
  });
  log.info({ port: postgres.port, databaseDir: postgres.dir }, 'embedded postgres started');
  return postgres;
}
