import path from 'node:path';
import { Redis } from 'ioredis';
import { createDatabase, type Db } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { PostgresServer, RedisServer } from '../../src/dev/servers/index.js';
import { createLogger } from '../../src/logger.js';
import { checkBooks, type FaultCaseReport, locksWithoutExpiry } from './fault-books.js';
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
}

/**
 * One fault case's world: its own redis-server and Postgres (started here, stopped and restarted by the case), the
 * migrated schema, a fleet of service processes, and direct connections to both servers for inspection.
 */
export class FaultBench {
  private constructor(
    readonly redis: RedisServer,
    readonly postgres: PostgresServer,
    readonly db: Db,
    readonly fleet: ServiceFleet,
    /** A direct connection to the bench's Redis, for looking at locks; reconnects by itself after a restart. */
    public inspector: Redis,
  ) {}

  static async start(options: FaultBenchOptions): Promise<FaultBench> {
    const [redis, postgres] = await Promise.all([
      // The cases crash Redis: `redis.stop()` is a SIGKILL.
      RedisServer.start({ extraArgs: options.redisArgs ?? [], stopMode: 'immediate' }),
      // Commits survive a crash of Postgres (synchronous_commit on), which is what the cases test; fsync guards only
      // against a crash of the machine.
      PostgresServer.start({ fsync: false, maxConnections: 200 }),
    ]);
    const db = createDatabase(postgres.url, 4);
    await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations'));
    const redisUrl = options.servicesRedisUrl ? await options.servicesRedisUrl(redis) : redis.url;
    const fleet = await ServiceFleet.start(
      options.instances,
      { REDIS_URL: redisUrl, DATABASE_URL: postgres.url, ...options.env },
      options.envOf,
    );
    return new FaultBench(redis, postgres, db, fleet, await connectInspector(redis.url));
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
    return sku;
  }

  /** Concurrent clients spread over the members in rotation; bounded in orders and in time. */
  load(sku: string, options: Partial<OrderLoadOptions> = {}): OrderLoad {
    return new OrderLoad({
      sku,
      targets: () => this.fleet.urls(),
      workers: 24,
      maxQuantity: 3,
      maxIntents: 20_000,
      maxDurationMs: 60_000,
      retryBudgetMs: 30_000,
      ...options,
    }).start();
  }

  /** Waits for the load to end, then checks the books against what the clients were told and prints the numbers. */
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
    const report = await checkBooks(this.db, { sku, load, apiView: view.status === 200 ? view.body : undefined });
    if (view.status !== 200) report.violations.push(`GET /skus/${sku} answered ${view.status}`);
    const eternalLocks = await locksWithoutExpiry(this.inspector);
    if (eternalLocks.length > 0) report.violations.push(`${eternalLocks.length} lock key(s) without expiry`);
    console.log(`[fault] ${label} ${JSON.stringify({ ...summarize(report), ...extra })}`);
    return report;
  }

  async teardown(): Promise<void> {
    await this.fleet.stopAll().catch(() => {});
    this.inspector.disconnect();
    await this.db.destroy().catch(() => {});
    await Promise.allSettled([this.redis.destroy(), this.postgres.destroy()]);
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
