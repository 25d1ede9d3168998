import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrator.js';
import { createLogger } from '../../src/logger.js';
import { checkAnswers, checkFaultCase, type FaultCaseReport } from '../support/fault-books.js';
import { checkLifecycle, LifecycleLoad, type LifecycleReport } from '../support/lifecycle-load.js';
import { OrderLoad } from '../support/order-load.js';
import {
  MONITOR_SETTINGS,
  PgAutoFailoverFormation,
  type PgAutoctlNode,
  pgAutoFailoverMissing,
  RedisServer,
} from '../support/servers/index.js';
import { call, uniqueSku } from '../support/service.js';
import { ServiceFleet } from '../support/service-fleet.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 1_500;
const SEGMENTS = 8;
/** The reservations' and carts' SKUs: more than the run can sell, so every refusal would be a fault. */
const LIFECYCLE_STOCK = 1_000_000;
/** Both instances answer /readyz 200 again within this of the standby's promotion. */
const READY_AFTER_PROMOTION_MS = 15_000;

const missing = pgAutoFailoverMissing();
if (missing) console.warn(`[skip] Postgres failover fault cases: ${missing}`);

/**
 * Two service instances on one Redis and a pg_auto_failover formation (monitor, primary, synchronous standby), given
 * the formation's multi-host DATABASE_URL (target_session_attrs=read-write). Direct orders (OrderLoad, until the SKU
 * sells out) and the order life cycle (LifecycleLoad: reservations confirmed or cancelled, carts) run throughout,
 * retried with their Idempotency-Keys on 503.
 */
class FailoverBench {
  private constructor(
    readonly formation: PgAutoFailoverFormation,
    readonly redis: RedisServer,
    readonly fleet: ServiceFleet,
  ) {}

  static async start(): Promise<FailoverBench> {
    const [formation, redis] = await Promise.allSettled([PgAutoFailoverFormation.start(), RedisServer.start()]);
    if (formation.status === 'rejected' || redis.status === 'rejected') {
      if (formation.status === 'fulfilled') await formation.value.destroy();
      if (redis.status === 'fulfilled') await redis.value.destroy();
      throw formation.status === 'rejected' ? formation.reason : (redis as PromiseRejectedResult).reason;
    }
    try {
      const db = createDatabase(formation.value.uri(), 2);
      await migrateToLatest(db, createLogger('warn'), path.resolve('dist/migrations')).finally(() => db.destroy());
      const fleet = await ServiceFleet.start(2, {
        REDIS_URL: redis.value.url,
        DATABASE_URL: formation.value.uri(),
        LOCK_TTL_MS: '5000',
      });
      return new FailoverBench(formation.value, redis.value, fleet);
    } catch (error) {
      await Promise.allSettled([formation.value.destroy(), redis.value.destroy()]);
      throw error;
    }
  }

  async createSku(stock: number): Promise<string> {
    const sku = uniqueSku('failover');
    const created = await call(this.fleet.urls()[0]!, 'POST', '/skus', { sku, stock, segments: SEGMENTS });
    if (created.status !== 201) throw new Error(`creating ${sku}: ${created.status} ${JSON.stringify(created.body)}`);
    return sku;
  }

  /** Both loads at once, on fresh SKUs. */
  async startLoads(): Promise<{ sku: string; orders: OrderLoad; lifecycle: LifecycleLoad }> {
    const sku = await this.createSku(STOCK);
    const lifecycleSkus: [string, string] = [
      await this.createSku(LIFECYCLE_STOCK),
      await this.createSku(LIFECYCLE_STOCK),
    ];
    const targets = () => this.fleet.urls();
    const orders = new OrderLoad({
      sku,
      targets,
      workers: 16,
      readers: 2,
      stock: STOCK,
      maxQuantity: 3,
      maxIntents: 20_000,
      maxDurationMs: 120_000,
      retryBudgetMs: 60_000,
    }).start();
    const lifecycle = new LifecycleLoad({
      skus: lifecycleSkus,
      targets,
      workers: 8,
      maxDurationMs: 120_000,
      retryBudgetMs: 60_000,
    }).start();
    return { sku, orders, lifecycle };
  }

  /**
   * Waits for both loads, then checks the books from `primary` directly (the server that now holds them): the
   * direct orders' SKU as every fault case does (checkFaultCase), the life cycle's as LifecycleLoad does.
   */
  async finish(
    label: string,
    primary: PgAutoctlNode,
    loads: { sku: string; orders: OrderLoad; lifecycle: LifecycleLoad },
    extra: Record<string, unknown>,
  ): Promise<{ orders: FaultCaseReport; lifecycle: LifecycleReport }> {
    await loads.orders.finished();
    await loads.lifecycle.stop();
    const crashed = this.fleet.members.filter((m) => m.child.exitCode !== null);
    if (crashed.length > 0)
      throw new Error(`${crashed.length} instance(s) exited:\n${this.fleet.logs().slice(-20_000)}`);
    const db: Db = createDatabase(primary.url(), 2);
    try {
      const view = await call(this.fleet.urls()[0]!, 'GET', `/skus/${loads.sku}`);
      const orders = await checkFaultCase(db, {
        sku: loads.sku,
        load: loads.orders,
        apiView: view.status === 200 ? view.body : undefined,
      });
      const linearizability = await checkAnswers(label, loads.sku, loads.orders, orders);
      const lifecycle = await checkLifecycle(db, loads.lifecycle);
      const { violations: _v, statuses, ...numbers } = orders;
      const { violations: _w, statuses: lifecycleStatuses, ...lifecycleNumbers } = lifecycle;
      console.log(
        `[fault] ${label} ${JSON.stringify({ ...extra, orders: { ...numbers, statuses, linearizability }, lifecycle: { ...lifecycleNumbers, statuses: lifecycleStatuses }, monitor: MONITOR_SETTINGS })}`,
      );
      return { orders, lifecycle };
    } finally {
      await db.destroy();
    }
  }

  async teardown(): Promise<void> {
    await this.fleet.stopAll().catch(() => {});
    await Promise.allSettled([this.formation.destroy(), this.redis.destroy()]);
  }
}

/** Statuses of every request both loads sent, 5xx other than 503 among them. */
function serverErrors(loads: { orders: OrderLoad; lifecycle: LifecycleLoad }): number[] {
  return [...loads.orders.attempts, ...loads.lifecycle.attempts]
    .map((a) => a.status)
    .filter((status) => status >= 500 && status !== 503);
}

function unavailable(loads: { orders: OrderLoad; lifecycle: LifecycleLoad }): number {
  return [...loads.orders.attempts, ...loads.lifecycle.attempts].filter((a) => a.status === 503).length;
}

describe.skipIf(missing)('fault: the Postgres primary dies (SIGKILL) mid-load under pg_auto_failover', () => {
  let bench: FailoverBench;
  beforeAll(async () => {
    bench = await FailoverBench.start();
  }, 240_000);
  afterAll(() => bench?.teardown());

  it('promotes the synchronous standby, loses no acknowledged order, and both instances are ready within 15 s', async () => {
    const [primary, standby] = bench.formation.nodes as [PgAutoctlNode, PgAutoctlNode];
    const loads = await bench.startLoads();
    expect(await loads.orders.untilAcknowledged(STOCK * 0.3)).toBe(true);

    const killedAt = Date.now();
    await primary.kill();
    // From the kill until the standby takes writes: the monitor's detection, the promotion, the demote timeout.
    const promoted = await waitFor(() => bench.formation.writable(standby), 60_000, 100);
    const promotedAt = Date.now();
    const promotionMs = promoted === Infinity ? Infinity : promotedAt - killedAt;
    const readyMs = await bench.fleet.readyWithin(READY_AFTER_PROMOTION_MS);
    const acknowledgedAtPromotion = loads.orders.acknowledgedUnits();
    expect(await loads.orders.untilAcknowledged(Math.min(STOCK, acknowledgedAtPromotion + 30), 30_000)).toBe(true);
    const firstOrderAfterPromotionMs =
      Math.min(
        ...loads.orders.attempts.filter((a) => a.status === 201 && a.receivedAt > promotedAt).map((a) => a.receivedAt),
      ) - promotedAt;

    const report = await bench.finish('Postgres primary SIGKILLed, standby promoted', standby, loads, {
      promotionMs,
      readyAfterPromotionMs: readyMs,
      firstOrderAfterPromotionMs,
      unavailable503: unavailable(loads),
    });
    expect(promotionMs).toBeLessThan(60_000);
    expect(readyMs).toBeLessThanOrEqual(READY_AFTER_PROMOTION_MS);
    expect(firstOrderAfterPromotionMs).toBeLessThanOrEqual(READY_AFTER_PROMOTION_MS);
    expect(serverErrors(loads)).toEqual([]);
    expect(unavailable(loads)).toBeGreaterThan(0);
    expect(report.orders.lost).toBe(0);
    expect(report.orders.oversold).toBe(0);
    expect(report.orders.violations).toEqual([]);
    expect(report.lifecycle.lost).toBe(0);
    expect(report.lifecycle.violations).toEqual([]);
    expect(report.lifecycle.acknowledged).toBeGreaterThan(0);
  }, 300_000);
});

describe.skipIf(missing)('fault: a planned switchover (pg_autoctl perform switchover) mid-load', () => {
  let bench: FailoverBench;
  beforeAll(async () => {
    bench = await FailoverBench.start();
  }, 240_000);
  afterAll(() => bench?.teardown());

  it('moves the primary with exact books, nothing lost, and only 503s while it moves', async () => {
    const [, standby] = bench.formation.nodes as [PgAutoctlNode, PgAutoctlNode];
    const loads = await bench.startLoads();
    expect(await loads.orders.untilAcknowledged(STOCK * 0.3)).toBe(true);

    const startedAt = Date.now();
    await bench.formation.switchover();
    const switchoverMs = Date.now() - startedAt;
    const writableMs = await waitFor(() => bench.formation.writable(standby), 30_000, 100);
    const readyMs = await bench.fleet.readyWithin(READY_AFTER_PROMOTION_MS);

    const report = await bench.finish('Postgres planned switchover', standby, loads, {
      switchoverMs,
      writableMs,
      readyAfterSwitchoverMs: readyMs,
      unavailable503: unavailable(loads),
    });
    expect(readyMs).toBeLessThanOrEqual(READY_AFTER_PROMOTION_MS);
    expect(serverErrors(loads)).toEqual([]);
    expect(report.orders.lost).toBe(0);
    expect(report.orders.oversold).toBe(0);
    expect(report.orders.violations).toEqual([]);
    expect(report.lifecycle.lost).toBe(0);
    expect(report.lifecycle.violations).toEqual([]);
  }, 300_000);
});
