import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { createDatabase } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { resolveEndpoints } from '../../src/endpoints.js';
import { createLogger } from '../../src/logger.js';
import { RedisCluster, RedisServer, ZooKeeperServer } from '../../test/support/servers/index.js';

export type BackingServices = Awaited<ReturnType<typeof startBackingServices>>;

// Redis and Postgres for a run (REDIS_URL / DATABASE_URL, else the service's embedded default, as `npm start` runs);
// the servers only some cases need start on first use and stop with the rest.
export async function startBackingServices(env: NodeJS.ProcessEnv) {
  const dir = mkdtempSync(path.join(tmpdir(), 'stock-loadtest-'));
  // Started as root, Postgres runs as its own user, which must reach the data directory.
  chmodSync(dir, 0o755);
  const stops: (() => Promise<unknown>)[] = [async () => rmSync(dir, { recursive: true, force: true })];
  const stopAll = () => Promise.allSettled(stops.reverse().map((stop) => stop()));
  const notes = [
    env.REDIS_URL ? 'Redis from REDIS_URL' : 'embedded redis-server (appendonly yes, appendfsync everysec)',
    env.DATABASE_URL ? 'Postgres from DATABASE_URL' : 'embedded Postgres (defaults: fsync on, synchronous_commit on)',
  ];
  /** Starts a server on first call; it stops with the run. */
  const lazy = <T extends { destroy(): Promise<unknown> }>(start: () => Promise<T>) => {
    let started: Promise<T> | undefined;
    return () =>
      (started ??= start().then((server) => {
        stops.push(() => server.destroy());
        return server;
      }));
  };
  try {
    const config = { ...loadConfig({ REDIS_URL: env.REDIS_URL, DATABASE_URL: env.DATABASE_URL }), dataDir: dir };
    const log = createLogger('warn');
    const endpoints = await resolveEndpoints(config, log);
    stops.push(() => endpoints.stopEmbedded());
    if (endpoints.redis.kind !== 'standalone') throw new Error('REDIS_URL or the embedded redis-server expected');
    const redisUrl = endpoints.redis.url;
    const pools = await poolsThatFit(endpoints.databaseUrl);
    if (pools.note) notes.push(pools.note);
    // The run's own connections, on a migrated database: the lock benchmark may run before any service migrated it.
    const db = createDatabase(endpoints.databaseUrl, 4);
    stops.push(() => db.destroy());
    await migrateToLatest(db, log);
    const cluster = lazy(async () => {
      notes.push('and a local Redis Cluster: 3 primaries, 3 replicas, no persistence');
      return RedisCluster.start();
    });
    // The lock benchmark's Redis servers have no persistence.
    const redlockNodes = [1, 2, 3].map(() => lazy(() => RedisServer.start()));
    return {
      redisEnv: { REDIS_URL: redisUrl },
      redisNodes: [redisUrl],
      databaseUrl: endpoints.databaseUrl,
      db,
      /** Pool sizes every service of the run gets, when the defaults would not fit the Postgres (else none). */
      poolEnv: pools.env,
      redisCluster: async () => {
        const { seeds, nodes } = await cluster();
        const redisNodes = nodes.map((node) => `127.0.0.1:${node.port}`);
        return { redisEnv: { REDIS_URL: '', REDIS_CLUSTER_NODES: seeds }, redisNodes };
      },
      lockRedis: lazy(() => RedisServer.start()),
      redlockUrls: () => Promise.all(redlockNodes.map(async (node) => (await node()).url)),
      zookeeper: lazy(() => ZooKeeperServer.start()),
      description: () => notes.join('; '),
      /** The embedded Postgres's postmaster (CPU accounting): postmaster.pid's first line; none from DATABASE_URL. */
      postmasterPid: env.DATABASE_URL ? undefined : parseInt(readFileSync(`${dir}/postgres/postmaster.pid`, 'utf8')),
      stop: stopAll,
    };
  } catch (error) {
    await stopAll();
    throw error;
  }
}

/**
 * An instance holds PG_POOL_SIZE + BATCHES_IN_FLIGHT connections (20 + 20 by default) and 2 more; three at once (the
 * shipped service beside the drop's two) and the run's own 10 need more than a Postgres as installed allows
 * (max_connections 100). There every service gets smaller pools that fit, and the report says so, rather than the run
 * failing halfway with "too many clients".
 */
const INSTANCES_AT_ONCE = 3;
const PER_INSTANCE_BESIDES_POOLS = 2;
const RUN_OWN = 10;
async function poolsThatFit(databaseUrl: string) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const query = client.query<{ free: number; max: number }>(`
      select current_setting('max_connections')::int as max,
             current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
               - (select count(*) from pg_stat_activity where backend_type = 'client backend')::int as free`);
  const { free, max } = (await query.finally(() => client.end())).rows[0]!;
  const each = Math.floor((Math.floor((free - RUN_OWN) / INSTANCES_AT_ONCE) - PER_INSTANCE_BESIDES_POOLS) / 2);
  if (each >= 20) return { env: {} };
  const size = String(Math.max(2, each));
  const note = `Postgres allows ${max} connections: every service ran with PG_POOL_SIZE=${size} and BATCHES_IN_FLIGHT=${size} (default 20 each)`;
  return { env: { PG_POOL_SIZE: size, BATCHES_IN_FLIGHT: size }, note };
}
