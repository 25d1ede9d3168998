import path from 'node:path';
import type { Endpoints } from '../app.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { redisConfigured, redisTopology } from '../redis/connections.js';
import { PostgresServer, RedisServer } from './servers/index.js';

export interface ResolvedEndpoints extends Endpoints {
  /** Stops whatever was started here; a no-op for URLs given in the environment. */
  stopEmbedded(): Promise<void>;
}

/**
 * The configured Redis and Postgres, or private ones under DATA_DIR for those left unset (the embedded default).
 * The load test starts its servers here too, so that it measures what `npm start` runs.
 */
export async function resolveEndpoints(
  config: Pick<
    Config,
    | 'redisUrl'
    | 'redisClusterNodes'
    | 'redisSentinels'
    | 'redisSentinelName'
    | 'redisPassword'
    | 'databaseUrl'
    | 'dataDir'
  >,
  log: Logger,
): Promise<ResolvedEndpoints> {
  const started: (RedisServer | PostgresServer)[] = [];
  // Gracefully, whatever they were started with: the data under DATA_DIR is kept for the next start.
  const stopEmbedded = async () => {
    await Promise.allSettled(started.reverse().map((server) => server.stop('graceful')));
  };
  try {
    let embeddedRedisUrl: string | undefined;
    if (!redisConfigured(config)) {
      const redis = await startEmbeddedRedis(config.dataDir, log);
      started.push(redis);
      embeddedRedisUrl = redis.url;
    }
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const postgres = await startEmbeddedPostgres(config.dataDir, log);
      started.push(postgres);
      databaseUrl = postgres.url;
    }
    return { redis: redisTopology(config, embeddedRedisUrl), databaseUrl, stopEmbedded };
  } catch (error) {
    await stopEmbedded();
    throw error;
  }
}

/**
 * redis-server under `<dataDir>/redis`, append-only file on, so that data survives restarts. Without redis-server
 * on the PATH this throws MissingDependencyError, whose message says how to get one.
 */
async function startEmbeddedRedis(dataDir: string, log: Logger): Promise<RedisServer> {
  const redis = await RedisServer.start({ dir: path.join(dataDir, 'redis'), persistence: 'aof' });
  log.info({ port: redis.port, dir: redis.dir }, 'embedded redis-server started');
  return redis;
}

/**
 * Postgres under `<dataDir>/postgres`, default durability (fsync and synchronous commits on); data survives restarts.
 * pg_stat_statements is loaded, as managed Postgres services do by default: it is how an operator (and the load
 * test's per-order figures) sees which statements an order costs.
 */
async function startEmbeddedPostgres(dataDir: string, log: Logger): Promise<PostgresServer> {
  const postgres = await PostgresServer.start({
    dir: path.join(dataDir, 'postgres'),
    maxConnections: 300,
    statementStatistics: true,
    log,
  });
  log.info({ port: postgres.port, databaseDir: postgres.dir }, 'embedded postgres started');
  return postgres;
}
