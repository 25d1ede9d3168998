import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { resolveEndpoints } from '../../src/endpoints.js';
import { RedisCluster } from '../../test/support/servers/index.js';
import { createLogger } from '../../src/logger.js';

export interface BackingServices {
  /** How the services reach Redis: REDIS_URL, or REDIS_CLUSTER_NODES. */
  redisEnv: Record<string, string>;
  /** Every Redis server behind redisEnv (`host:port`, or a URL), to read their own counters. */
  redisNodes: string[];
  /**
   * A local Redis Cluster (3 primaries, 3 replicas) beside the run's Redis, started on first call and stopped with
   * the rest: for cases that compare the two in one run. With `redisCluster`, the run's own.
   */
  redisCluster(): Promise<{ redisEnv: Record<string, string>; redisNodes: string[] }>;
  databaseUrl: string;
  /** How they were obtained, for the report. */
  description: string;
  /** What identifies the run's own server processes, when the run started them (for CPU accounting). */
  processMarkers: { postgres?: string; redis?: string[] };
  stop(): Promise<void>;
}

/**
 * Redis and Postgres for a run: the URLs from REDIS_URL / DATABASE_URL when set, otherwise the service's embedded
 * default (redis-server with AOF, embedded Postgres with its default durability) in a throwaway directory, so the
 * benchmark measures what `npm start` runs. With `redisCluster`, a local Redis Cluster (3 primaries, 3 replicas,
 * no persistence) instead of the one redis-server.
 */
export async function startBackingServices(
  env: NodeJS.ProcessEnv = process.env,
  options: { redisCluster?: boolean } = {},
): Promise<BackingServices> {
  const dir = mkdtempSync(path.join(tmpdir(), 'stock-loadtest-'));
  // Started as root, Postgres runs as its own user, which must reach the data directory.
  chmodSync(dir, 0o755);
  let cluster = options.redisCluster ? await RedisCluster.start() : undefined;
  try {
    const endpoints = await resolveEndpoints(
      {
        ...loadConfig(
          cluster
            ? { REDIS_CLUSTER_NODES: cluster.seeds, DATABASE_URL: env.DATABASE_URL }
            : { REDIS_URL: env.REDIS_URL, DATABASE_URL: env.DATABASE_URL },
        ),
        dataDir: dir,
      },
      createLogger('warn'),
    );
    const notes: string[] = [];
    const processMarkers: BackingServices['processMarkers'] = {};
    const clusterNote = 'local Redis Cluster: 3 primaries, 3 replicas, no persistence';
    const clusterNodes = (c: RedisCluster) => c.nodes.map((node) => `127.0.0.1:${node.port}`);
    const clusterEnv = (c: RedisCluster) => ({ REDIS_URL: '', REDIS_CLUSTER_NODES: c.seeds });
    let redisEnv: Record<string, string>;
    let redisNodes: string[];
    if (cluster) {
      redisEnv = clusterEnv(cluster);
      redisNodes = clusterNodes(cluster);
      // Every node's CPU counts as Redis: the figures are summed over the cluster's processes.
      processMarkers.redis = redisNodes;
      notes.push(clusterNote);
    } else {
      if (endpoints.redis.kind !== 'standalone') throw new Error('REDIS_URL or the embedded redis-server expected');
      const redisUrl = endpoints.redis.url;
      redisEnv = { REDIS_URL: redisUrl };
      redisNodes = [redisUrl];
      if (env.REDIS_URL) notes.push('Redis from REDIS_URL');
      else {
        // redis-server shows only its address in its process title.
        processMarkers.redis = [new URL(redisUrl).host];
        notes.push('embedded redis-server (appendonly yes, appendfsync everysec)');
      }
    }
    const redisCluster = async () => {
      if (!cluster) {
        cluster = await RedisCluster.start();
        processMarkers.redis = [...(processMarkers.redis ?? []), ...clusterNodes(cluster)];
        notes.push(`and a ${clusterNote}`);
      }
      return { redisEnv: clusterEnv(cluster), redisNodes: clusterNodes(cluster) };
    };
    if (env.DATABASE_URL) notes.push('Postgres from DATABASE_URL');
    else {
      // The postmaster's command line names its data directory, under this one.
      processMarkers.postgres = dir;
      notes.push('embedded Postgres (default durability: fsync on, synchronous_commit on)');
    }
    const stop = async () => {
      await endpoints.stopEmbedded();
      await cluster?.destroy();
      rmSync(dir, { recursive: true, force: true });
    };
    const { databaseUrl } = endpoints;
    return {
      redisEnv,
      redisNodes,
      redisCluster,
      databaseUrl,
      get description() {
        return notes.join('; ');
      },
      processMarkers,
      stop,
    };
  } catch (error) {
    // resolveEndpoints stopped what it had started.
    await cluster?.destroy();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
