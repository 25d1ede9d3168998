import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { resolveEndpoints } from '../../src/dev/endpoints.js';
import { createLogger } from '../../src/logger.js';

export interface BackingServices {
  /** How the services reach Redis: REDIS_URL, or REDIS_CLUSTER_NODES. */
  redisEnv: Record<string, string>;
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
  const dir = mkdtempSync(path.join(tmpdir(), 'stock-loadtest-'));
  // Started as root, Postgres runs as its own user, which must reach the data directory.
  chmodSync(dir, 0o755);
  try {
    const endpoints = await resolveEndpoints(
      {
        ...loadConfig({ REDIS_URL: env.REDIS_URL, DATABASE_URL: env.DATABASE_URL }),
        dataDir: dir,
      },
      createLogger('warn'),
    );
    if (endpoints.redis.kind !== 'standalone') throw new Error('the load test runs on one Redis here');
    const redisUrl = endpoints.redis.url;
    const notes: string[] = [];
    const processMarkers: BackingServices['processMarkers'] = {};
    if (env.REDIS_URL) notes.push('Redis from REDIS_URL');
    else {
      // redis-server shows only its address in its process title.
      processMarkers.redis = new URL(redisUrl).host;
      notes.push('embedded redis-server (appendonly yes, appendfsync everysec)');
    }
    if (env.DATABASE_URL) notes.push('Postgres from DATABASE_URL');
    else {
      // The postmaster's command line names its data directory, under this one.
      processMarkers.postgres = dir;
      notes.push('embedded Postgres (default durability: fsync on, synchronous_commit on)');
    }
    const stop = async () => {
      await endpoints.stopEmbedded();
      rmSync(dir, { recursive: true, force: true });
    };
    const { databaseUrl } = endpoints;
    return { redisEnv: { REDIS_URL: redisUrl }, databaseUrl, description: notes.join('; '), processMarkers, stop };
  } catch (error) {
    // resolveEndpoints stopped what it had started.
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
