import path from 'node:path';
import { Redis } from 'ioredis';
import { createDatabase, type Db } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import {
  PostgresServer,
  RedisCluster,
  type RedisClusterOptions,
  RedisSentinelGroup,
  type RedisSentinelOptions,
  RedisServer,
} from './servers/index.js';
import { createLogger } from '../../src/logger.js';
import { checkAnswers, checkFaultCase, type FaultCaseReport, locksWithoutExpiry } from './fault-books.js';
import { OrderLoad, type OrderLoadOptions } from './order-load.js';
import { call, uniqueSku } from './service.js';
import { ServiceFleet } from './service-fleet.js';

export interface FaultBenchOptions {
  instances: number;
  /** Environment of every instance (LOCK_TTL_MS, …) and of single ones. */
  env?: Record<string, string>;
  envOf?: (index: number) => Record<string, string>;
  /** Extra redis-server arguments (persistence, …) when the bench starts its own Redis. */
  redisArgs?: string[];
  /** Where the services find Redis, when something (a forwarder) stands between them and the bench's Redis. */
  servicesRedisUrl?: (redis: RedisServer) => Promise<string> | string;
  /** A Redis Cluster instead of one redis-server (its nodes are killed with SIGKILL). */
  redisCluster?: RedisClusterOptions;
  /** A primary, a replica and a Sentinel instead of one redis-server (primary and replica die by SIGKILL). */
  redisSentinel?: RedisSentinelOptions;
}

/**
 * One fault case's world: its own redis-server and Postgres (started here, stopped and restarted by the case), the
 * migrated schema, a fleet of service processes, and direct connections to both servers for inspection.
 */
export class FaultBench {
  /** The stock each SKU was created with: the starting state of its history. */
  private readonly stockOf = new Map<string, number>();

  private constructor(
    private readonly redisStore: RedisServer | RedisCluster | RedisSentinelGroup,
    readonly postgres: PostgresServer,
    readonly db: Db,
    readonly fleet: ServiceFleet,
    /** A direct connection to the bench's Redis, for looking at locks; reconnects by itself after a restart. */
    public inspector: Redis,
  ) {}

  /**
   * The bench of the cases that stop one instance mid-flight (SIGTERM, kill -9, a stall): three instances with
   * `lockTtlMs` leases, the third (`victim`) spending `sectionMs` inside each critical section, so it nearly always
   * holds locks when the case strikes, while the others hold theirs for milliseconds.
   */
  static withSlowVictim(lockTtlMs: number, sectionMs: number): Promise<FaultBench> {
    return FaultBench.start({
      instances: 3,
      env: { LOCK_TTL_MS: String(lockTtlMs) },
      envOf: (index): Record<string, string> => (index === 2 ? { CRITICAL_SECTION_DELAY_MS: String(sectionMs) } : {}),
    });
  }

  /** The instance `withSlowVictim` slowed down. */
  get victim() {
    return this.fleet.members[2]!;
  }

  static async start(options: FaultBenchOptions): Promise<FaultBench> {
    // A set-up that fails midway stops what it started: no server outlives a bench that never ran.
    const started: { destroy(): Promise<unknown> }[] = [];
    const keep = <T extends { destroy(): Promise<unknown> }>(server: T) => (started.push(server), server);
    try {
      // The cases crash Redis: `redis.stop()` is a SIGKILL.
      const redisStart: Promise<RedisServer | RedisCluster | RedisSentinelGroup> = options.redisCluster
        ? RedisCluster.start({ ...options.redisCluster, stopMode: 'immediate' })
        : options.redisSentinel
          ? RedisSentinelGroup.start({ ...options.redisSentinel, stopMode: 'immediate' })
          : RedisServer.start({ extraArgs: options.redisArgs ?? [], stopMode: 'immediate' });
      const [redisStarted, postgresStarted] = await Promise.allSettled([
        redisStart.then(keep),
        // Commits survive a crash of Postgres (synchronous_commit on), which is what the cases test; fsync guards
        // only against a crash of the machine.
        PostgresServer.start({ fsync: false, maxConnections: 200 }).then(keep),
      ]);
      if (redisStarted.status === 'rejected') throw redisStarted.reason;
      if (postgresStarted.status === 'rejected') throw postgresStarted.reason;
      const [redis, postgres] = [redisStarted.value, postgresStarted.value];
      const db = keep(createDatabase(postgres.url, 4));
      await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations'));
      const redisEnv: Record<string, string> =
        redis instanceof RedisCluster
          ? { REDIS_URL: '', REDIS_CLUSTER_NODES: redis.seeds }
          : redis instanceof RedisSentinelGroup
            ? { REDIS_URL: '', REDIS_SENTINELS: redis.sentinels, REDIS_SENTINEL_NAME: redis.name }
            : { REDIS_URL: options.servicesRedisUrl ? await options.servicesRedisUrl(redis) : redis.url };
      const env = { ...redisEnv, DATABASE_URL: postgres.url, ...options.env };
      const fleet = await ServiceFleet.start(options.instances, env, options.envOf);
      keep({ destroy: () => fleet.stopAll() });
      // On a cluster the inspector looks at one node, and `finish` at every primary; with Sentinel, at the primary.
      const inspected =
        redis instanceof RedisCluster
          ? `redis://127.0.0.1:${redis.nodes[0]!.port}`
          : redis instanceof RedisSentinelGroup
            ? redis.primary.url
            : redis.url;
      return new FaultBench(redis, postgres, db, fleet, await connectInspector(inspected));
    } catch (error) {
      await Promise.allSettled(started.reverse().map((server) => server.destroy()));
      throw error;
    }
  }

  /** The bench's redis-server (not on a cluster). */
  get redis(): RedisServer {
    if (!(this.redisStore instanceof RedisServer)) throw new Error('this bench does not run on one redis-server');
    return this.redisStore;
  }

  /** The bench's primary, replica and Sentinel (only with `redisSentinel`). */
  get sentinelGroup(): RedisSentinelGroup {
    if (!(this.redisStore instanceof RedisSentinelGroup)) throw new Error('this bench does not run with Sentinel');
    return this.redisStore;
  }

  /** The bench's Redis Cluster (only with `redisCluster`). */
  get cluster(): RedisCluster {
    if (!(this.redisStore instanceof RedisCluster)) throw new Error('this bench does not run on a Redis Cluster');
    return this.redisStore;
  }

  /** Looks at another Redis from now on (the one a failover promoted). */
  async inspect(url: string): Promise<void> {
    this.inspector.disconnect();
    this.inspector = await connectInspector(url);
  }

  async createSku(stock: number, segments: number): Promise<string> {
    const sku = uniqueSku('fault');
    const created = await call(this.fleet.urls()[0]!, 'POST', '/skus', { sku, stock, segments });
    if (created.status !== 201) throw new Error(`creating ${sku}: ${created.status} ${JSON.stringify(created.body)}`);
    this.stockOf.set(sku, stock);
    return sku;
  }

  /**
   * Concurrent clients spread over the members in rotation, and two clients reading the SKU meanwhile; bounded in
   * orders and in time. Every order and read goes into the load's history.
   */
  load(sku: string, options: Partial<OrderLoadOptions> = {}): OrderLoad {
    return new OrderLoad({
      sku,
      targets: () => this.fleet.urls(),
      workers: 24,
      readers: 2,
      ...(this.stockOf.has(sku) ? { stock: this.stockOf.get(sku)! } : {}),
      maxQuantity: 3,
      maxIntents: 20_000,
      maxDurationMs: 60_000,
      retryBudgetMs: 30_000,
      ...options,
    }).start();
  }

  /**
   * Waits for the load to end, then checks the books against what the clients were told, and every answer the
   * clients were given for linearizability (`checkAnswers`), and prints the numbers.
   */
  async finish(
    label: string,
    sku: string,
    load: OrderLoad,
    extra: Record<string, unknown> = {},
  ): Promise<FaultCaseReport> {
    await load.finished();
    // Killed members end by signal and drained ones with 0: any other exit is a crash.
    const crashed = this.fleet.members.filter((m) => m.child.exitCode !== null && m.child.exitCode !== 0);
    if (crashed.length > 0) {
      throw new Error(`${crashed.length} instance(s) crashed:\n${this.fleet.logs().slice(-20_000)}`);
    }
    const view = await call(this.fleet.urls()[0]!, 'GET', `/skus/${sku}`);
    const report = await checkFaultCase(this.db, { sku, load, apiView: view.status === 200 ? view.body : undefined });
    if (view.status !== 200) report.violations.push(`GET /skus/${sku} answered ${view.status}`);
    const eternalLocks = await this.locksWithoutExpiry();
    if (eternalLocks.length > 0) report.violations.push(`${eternalLocks.length} lock key(s) without expiry`);
    const linearizability = await checkAnswers(label, sku, load, report);
    console.log(`[fault] ${label} ${JSON.stringify({ ...summarize(report), linearizability, ...extra })}`);
    if (report.violations.length > 0)
      console.log(
        this.fleet
          .logs()
          .split('\n')
          .filter((line) => /"level":(40|50)/.test(line))
          .slice(-30)
          .join('\n'),
      );
    return report;
  }

  async teardown(): Promise<void> {
    await this.fleet.stopAll().catch(() => {});
    this.inspector.disconnect();
    await this.db.destroy().catch(() => {});
    await Promise.allSettled([this.redisStore.destroy(), this.postgres.destroy()]);
  }

  /** Lock keys without an expiry, on the bench's Redis or on every primary of its cluster. */
  private async locksWithoutExpiry(): Promise<string[]> {
    if (!(this.redisStore instanceof RedisCluster)) return locksWithoutExpiry(this.inspector);
    const found: string[] = [];
    for (const primary of await this.redisStore.primaries()) {
      const redis = await connectInspector(`redis://127.0.0.1:${primary.port}`);
      try {
        found.push(...(await locksWithoutExpiry(redis)));
      } finally {
        redis.disconnect();
      }
    }
    return found;
  }
}

async function connectInspector(url: string): Promise<Redis> {
  const inspector = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  inspector.on('error', () => {});
  await inspector.connect();
  return inspector;
}

function summarize(report: FaultCaseReport) {
  const { violations, statuses, ...numbers } = report;
  return {
    ...numbers,
    created201: statuses['201'] ?? 0,
    replayed200: statuses['200'] ?? 0,
    refused409: statuses['409'] ?? 0,
    unavailable503: statuses['503'] ?? 0,
    noAnswer: statuses['0'] ?? 0,
    violations: violations.length,
  };
}
