import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres } from '../../src/dev/embedded-postgres.js';
import { type EmbeddedServer, startEmbeddedRedis } from '../../src/dev/embedded-redis.js';
import { createLogger } from '../../src/logger.js';

export interface BackingServices {
  redisUrl: string;
  databaseUrl: string;
  /** How they were obtained, for the report. */
  description: string;
  /** What identifies the run's own server processes, when the run started them (for CPU accounting). */
  processMarkers: { postgres?: string; redis?: string };
  stop(): Promise<void>;
}

/**
 * Redis and Postgres for a run: the URLs from REDIS_URL / DATABASE_URL when set, otherwise the service's embedded
 * default (redis-server with AOF, embedded Postgres with its default durability) in a throwaway directory, so the
 * benchmark measures what `npm start` runs.
 */
export async function startBackingServices(env: NodeJS.ProcessEnv = process.env): Promise<BackingServices> {
  const started: EmbeddedServer[] = [];
  const dir = mkdtempSync(path.join(tmpdir(), 'stock-loadtest-'));
  // Started as root, Postgres runs as its own user, which must reach the data directory.
  chmodSync(dir, 0o755);
  const log = createLogger('warn');
  const stop = async () => {
    await Promise.allSettled(started.reverse().map((server) => server.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const notes: string[] = [];
    const processMarkers: BackingServices['processMarkers'] = {};
    let redisUrl = env.REDIS_URL;
    if (redisUrl) notes.push('Redis from REDIS_URL');
    else {
      const redis = await startEmbeddedRedis(dir, log);
      started.push(redis);
      redisUrl = redis.url;
      // redis-server shows only its address in its process title.
      processMarkers.redis = new URL(redis.url).host;
      notes.push('embedded redis-server (appendonly yes, appendfsync everysec)');
    }
    let databaseUrl = env.DATABASE_URL;
    if (databaseUrl) notes.push('Postgres from DATABASE_URL');
    else {
      const postgres = await startEmbeddedPostgres(dir, log);
      started.push(postgres);
      databaseUrl = postgres.url;
      processMarkers.postgres = dir;
      notes.push('embedded Postgres (default durability: fsync on, synchronous_commit on)');
    }
    return { redisUrl, databaseUrl, description: notes.join('; '), processMarkers, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
