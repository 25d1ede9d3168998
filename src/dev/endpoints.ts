import type { Endpoints } from '../app.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { startEmbeddedPostgres } from './embedded-postgres.js';
import { type EmbeddedServer, startEmbeddedRedis } from './embedded-redis.js';

export interface ResolvedEndpoints extends Endpoints {
  /** Stops whatever was started here; a no-op for URLs given in the environment. */
  stopEmbedded(): Promise<void>;
}

/** The configured Redis and Postgres, or private ones under DATA_DIR for those left unset (the embedded default). */
export async function resolveEndpoints(config: Config, log: Logger): Promise<ResolvedEndpoints> {
  const started: EmbeddedServer[] = [];
  const stopEmbedded = async () => {
    await Promise.allSettled(started.reverse().map((server) => server.stop()));
  };
  try {
    let redisUrl = config.redisUrl;
    if (!redisUrl) {
      const redis = await startEmbeddedRedis(config.dataDir, log);
      started.push(redis);
      redisUrl = redis.url;
    }
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const postgres = await startEmbeddedPostgres(config.dataDir, log);
      started.push(postgres);
      databaseUrl = postgres.url;
    }
    return { redisUrl, databaseUrl, stopEmbedded };
  } catch (error) {
    await stopEmbedded();
    throw error;
  }
}
