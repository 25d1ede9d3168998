import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Mutex } from 'async-mutex';
import { type RawBuilder, sql } from 'kysely';
import type { StockService } from '../../src/app.js';
import type { SkuRow } from '../../src/db/schema.js';
import { AppError } from '../../src/errors.js';
import { outOfStock } from '../../src/orders/outcome.js';
import { readSkuStock } from '../../src/stock/stock.repository.js';
import { businessStepMs } from './business-step.js';

/** What guards the oversell demonstration's read-decide-write: nothing, a process-local mutex, or the segment lock. */
export const guardModes = ['none', 'local-mutex', 'redis-lock'] as const;

/**
 * The stock counter of the lock-free Redis baseline, one key per script call: the benchmark's own key, beside the
 * service's (src/lock/keys.ts), which no service code reads.
 */
export const benchStockKey = (sku: string) => `bench:stock:{${sku}}`;

/** Checks and decrements KEYS[1] by ARGV[1]: the stock left, -1 when short, -2 when the counter does not exist yet. */
const takeStockLua = `
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
if tonumber(stock) < tonumber(ARGV[1]) then return -1 end
return redis.call('DECRBY', KEYS[1], ARGV[1])
`;

/** One sale as the benchmark routes write it: the order row and its single ledger row, on one segment. */
const saleOf = (sku: SkuRow, segment: number, quantity: number) => ({ orderId: randomUUID(), sku, segment, quantity });
type BenchSale = ReturnType<typeof saleOf>;
const segmentOf = ({ sku, segment }: BenchSale) =>
  sql`sku_id = ${sku.id} and layout_version = ${sku.layout_version} and segment = ${segment}`;

/** Sales the product never makes: the oversell demonstration and lock-free designs, writing the product's rows. */
export function unguardedSales({ db, redis, locks, config }: Pick<StockService, 'db' | 'redis' | 'locks' | 'config'>) {
  // The same business step as the product's batches hold (CRITICAL_SECTION_DELAY_MS).
  const stepMs = businessStepMs();
  const skus = new Map<string, SkuRow>();
  /** The lock a single-instance service might use: a process-local mutex per SKU, first come first served. */
  const mutexes = new Map<string, Mutex>();
  redis.defineCommand('benchTakeStock', { numberOfKeys: 1, lua: takeStockLua });
  // defineCommand adds the command at run time; this names it without widening ioredis' own type.
  const commands = redis as unknown as { benchTakeStock(key: string, quantity: number): Promise<number> };

  /** The read-decide-write of one order under a guard, on a single-segment SKU. */
  async function sellGuarded(mode: (typeof guardModes)[number], skuName: string, quantity: number) {
    const sku = await skuOf(skuName);
    if (sku.segment_count !== 1)
      throw new AppError('bad_request', 'the oversell demonstration sells from single-segment SKUs only');
    const sale = saleOf(sku, 0, quantity);
    let fence: number | null = null;
    let release: () => unknown = () => {};
    if (mode === 'local-mutex') {
      const mutex = mutexes.get(sku.sku) ?? new Mutex();
      mutexes.set(sku.sku, mutex);
      release = await mutex.acquire();
    } else if (mode === 'redis-lock') {
      const ref = { sku: sku.sku, layoutVersion: sku.layout_version, segment: 0 };
      const lease = await locks.acquire(ref, Date.now() + config.lockWaitMs);
      if (!lease) throw new AppError('lock_busy', `the segment stayed locked for ${config.lockWaitMs} ms`, {}, 1);
      fence = lease.fence;
      release = () => locks.releaseAll([lease]);
    }
    try {
      const read = sql<{ available: string }>`select available from stock_segments where ${segmentOf(sale)}`;
      const [row] = (await read.execute(db)).rows;
      if (!row) throw new AppError('sku_not_found', `SKU '${sku.sku}' has no segment 0`);
      const available = Number(row.available);
      if (available < quantity) throw outOfStock(sku.sku, quantity, available);
      if (stepMs > 0) await sleep(stepMs);
      // The write stores the stock computed from the read: fenced, only if no later holder wrote the row (the
      // product's rule); unfenced, blindly, which loses updates when nothing serialises the callers.
      const fenced = fence === null ? sql`true` : sql`fence_token < ${fence}`;
      const write = sql`update stock_segments
        set available = ${available - quantity}, fence_token = ${fence ?? sql`fence_token`}, sold = sold + ${quantity}
        where ${segmentOf(sale)} and ${fenced} returning sku_id`;
      const sold = await withOrderAndLedger(sale, write, fence ?? 0);
      if (!sold) throw new AppError('lock_busy', 'the segment lock was lost before the write; nothing was sold', {}, 1);
      return sold;
    } finally {
      await release();
    }
  }

  /** The lock-free Postgres baseline: from a random row on, a statement per row that deducts only if enough is left. */
  async function sellConditional(skuName: string, quantity: number) {
    const sku = await skuOf(skuName);
    const start = Math.floor(Math.random() * sku.segment_count);
    for (let i = 0; i < sku.segment_count; i++) {
      const sale = saleOf(sku, (start + i) % sku.segment_count, quantity);
      const deduct = sql`update stock_segments set available = available - ${quantity}, sold = sold + ${quantity}
        where ${segmentOf(sale)} and available >= ${quantity} returning sku_id`;
      const sold = await withOrderAndLedger(sale, deduct);
      if (sold) return sold;
    }
    throw outOfStock(sku.sku, quantity, await availableOf(sku));
  }

  /** Stock in a Redis counter (seeded once from Postgres), decremented by a script; the ledger goes to Postgres. */
  async function sellFromCounter(skuName: string, quantity: number) {
    const sku = await skuOf(skuName);
    const key = benchStockKey(sku.sku);
    let left = await commands.benchTakeStock(key, quantity);
    if (left === -2) {
      await redis.set(key, await availableOf(sku), 'NX');
      left = await commands.benchTakeStock(key, quantity);
    }
    if (left < 0) throw outOfStock(sku.sku, quantity, Number(await redis.get(key)));
    const sale = saleOf(sku, 0, quantity);
    // The stock lives in Redis: the segment only counts the units sold. A failed ledger write gives the units back.
    const count = sql`update stock_segments set sold = sold + ${quantity} where ${segmentOf(sale)} returning sku_id`;
    return withOrderAndLedger(sale, count).catch(async (error: unknown) => {
      await redis.incrby(key, quantity).catch(() => {});
      throw error;
    });
  }

  /** The order and its ledger row in one statement with `step` (the CTE `done`), if it returned a row; the answer. */
  async function withOrderAndLedger(sale: BenchSale, step: RawBuilder<unknown>, fence = 0) {
    const { orderId, sku, segment, quantity } = sale;
    const { rows } = await sql<{ order_id: string }>`
    with done as (${step}),
    placed as (
      insert into orders (id, sku_id, quantity) select ${orderId}::uuid, ${sku.id}, ${quantity} from done limit 1
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sku.id}, ${segment}, ${sku.layout_version}, ${quantity}, ${fence} from placed
    returning order_id`.execute(db);
    return rows.length === 1 ? { orderId, sku: sku.sku, quantity } : null;
  }

  /** A SKU's row, read once: benchmark SKUs are never re-segmented, so its layout stays true. */
  async function skuOf(name: string): Promise<SkuRow> {
    const row = skus.get(name) ?? (await readSkuStock(db, name))?.sku;
    if (!row) throw new AppError('sku_not_found', `SKU '${name}' does not exist`);
    skus.set(name, row);
    return row;
  }

  async function availableOf(sku: SkuRow): Promise<number> {
    const { segments } = (await readSkuStock(db, sku.sku))!;
    return segments.reduce((sum, segment) => sum + segment.available, 0);
  }
  return { sellGuarded, sellConditional, sellFromCounter };
}
