import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Mutex } from 'async-mutex';
import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { AppError } from '../../src/errors.js';
import type { SegmentLocks } from '../../src/inventory/segment-locks.js';
import { outOfStock } from '../../src/orders/outcome.js';
import { redisKeys } from '../../src/lock/keys.js';
import type { RedisClient } from '../../src/redis/connections.js';

/** What guards the oversell demonstration's read-decide-write: nothing, a process-local mutex, or the segment lock. */
export const guardModes = ['none', 'local-mutex', 'redis-lock'] as const;
export type GuardMode = (typeof guardModes)[number];

/** Checks and decrements KEYS[1] by ARGV[1]: the stock left, -1 when short, -2 when the counter does not exist yet. */
const takeStockLua = `
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
if tonumber(stock) < tonumber(ARGV[1]) then return -1 end
return redis.call('DECRBY', KEYS[1], ARGV[1])
`;

/** One sale as the benchmark routes write it: the order row and its single ledger row, on one segment. */
type BenchSale = { orderId: string; skuId: number; layoutVersion: number; segment: number; quantity: number };
type SegmentRef = Pick<BenchSale, 'skuId' | 'layoutVersion' | 'segment'>;
const segmentOf = (ref: SegmentRef) =>
  sql`sku_id = ${ref.skuId} and layout_version = ${ref.layoutVersion} and segment = ${ref.segment}`;

/** Sales the product never makes: the oversell demonstration and lock-free designs, writing the product's rows. */
export class UnguardedSales {
  /** Benchmark SKUs are never re-segmented, so a layout read once stays true. */
  private readonly skus = new Map<string, Promise<{ id: number; sku: string; segments: number; version: number }>>();
  /** The lock a single-instance service might use: a process-local mutex per SKU, first come first served. */
  private readonly mutexes = new Map<string, Mutex>();
  private readonly takeStock: (key: string, quantity: number) => Promise<number>;

  constructor(
    private readonly db: Db,
    private readonly redis: RedisClient,
    private readonly locks: SegmentLocks,
    private readonly options: { lockWaitMs: number; criticalSectionDelayMs: number },
  ) {
    redis.defineCommand('benchTakeStock', { numberOfKeys: 1, lua: takeStockLua });
    // defineCommand adds the method at run time; this names it without widening ioredis' own type.
    const commands = redis as unknown as { benchTakeStock(key: string, quantity: number): Promise<number> };
    this.takeStock = (key, quantity) => commands.benchTakeStock(key, quantity);
  }

  /** The read-decide-write of one order under a guard, on a single-segment SKU. */
  async sellGuarded(mode: GuardMode, skuName: string, quantity: number) {
    const sku = await this.sku(skuName);
    if (sku.segments !== 1)
      throw new AppError('bad_request', 'the oversell demonstration sells from single-segment SKUs only');
    const segment = { skuId: sku.id, layoutVersion: sku.version, segment: 0 };
    let fence: number | null = null;
    let release: () => unknown = () => {};
    if (mode === 'local-mutex') {
      const mutex = this.mutexes.get(sku.sku) ?? new Mutex();
      this.mutexes.set(sku.sku, mutex);
      release = await mutex.acquire();
    } else if (mode === 'redis-lock') {
      const lease = await this.locks.acquire({ sku: sku.sku, ...segment }, Date.now() + this.options.lockWaitMs);
      if (!lease) throw new AppError('lock_busy', `the segment stayed locked for ${this.options.lockWaitMs} ms`, {}, 1);
      fence = lease.fence;
      release = () => this.locks.releaseAll([lease]);
    }
    try {
      const read = sql<{ available: string }>`select available from stock_segments where ${segmentOf(segment)}`;
      const [row] = (await read.execute(this.db)).rows;
      if (!row) throw new AppError('sku_not_found', `SKU '${sku.sku}' has no segment 0`);
      const available = Number(row.available);
      if (available < quantity) throw outOfStock(sku.sku, quantity, available);
      if (this.options.criticalSectionDelayMs > 0) await sleep(this.options.criticalSectionDelayMs);
      // The write stores the stock computed from the read: fenced, only if no later holder wrote the row (the
      // product's rule); unfenced, blindly, which loses updates when nothing serialises the callers.
      const sale = { orderId: randomUUID(), ...segment, quantity };
      const fenced = fence === null ? sql`true` : sql`fence_token < ${fence}`;
      const write = sql`update stock_segments
        set available = ${available - quantity}, fence_token = ${fence ?? sql`fence_token`}, sold = sold + ${quantity}
        where ${segmentOf(sale)} and ${fenced} returning sku_id`;
      if (!(await this.withOrderAndLedger(sale, write, fence)))
        throw new AppError('lock_busy', 'the segment lock was lost before the write; nothing was sold', {}, 1);
      return { orderId: sale.orderId, sku: sku.sku, quantity };
    } finally {
      await release();
    }
  }

  /** The lock-free Postgres baseline: from a random row on, a statement per row that deducts only if enough is left. */
  async sellConditional(skuName: string, quantity: number) {
    const sku = await this.sku(skuName);
    const start = Math.floor(Math.random() * sku.segments);
    for (let i = 0; i < sku.segments; i++) {
      const segment = (start + i) % sku.segments;
      const sale = { orderId: randomUUID(), skuId: sku.id, layoutVersion: sku.version, segment, quantity };
      const deduct = sql`update stock_segments set available = available - ${quantity}, sold = sold + ${quantity}
        where ${segmentOf(sale)} and available >= ${quantity} returning sku_id`;
      if (await this.withOrderAndLedger(sale, deduct)) return { orderId: sale.orderId, sku: sku.sku, quantity };
    }
    throw outOfStock(sku.sku, quantity, await this.availableOf(sku.id));
  }

  /** Stock in a Redis counter (seeded once from Postgres), decremented by a script; the ledger goes to Postgres. */
  async sellFromCounter(skuName: string, quantity: number) {
    const sku = await this.sku(skuName);
    const key = redisKeys.benchStock(sku.sku);
    let left = await this.takeStock(key, quantity);
    if (left === -2) {
      await this.redis.set(key, await this.availableOf(sku.id), 'NX');
      left = await this.takeStock(key, quantity);
    }
    if (left < 0) throw outOfStock(sku.sku, quantity, Number(await this.redis.get(key)));
    const sale = { orderId: randomUUID(), skuId: sku.id, layoutVersion: sku.version, segment: 0, quantity };
    // The stock lives in Redis: the segment only counts the units sold. A failed ledger write gives the units back.
    const count = sql`update stock_segments set sold = sold + ${quantity} where ${segmentOf(sale)} returning sku_id`;
    await this.withOrderAndLedger(sale, count).catch(async (error: unknown) => {
      await this.redis.incrby(key, quantity).catch(() => {});
      throw error;
    });
    return { orderId: sale.orderId, sku: sku.sku, quantity };
  }

  /** The counter's stock, or null before the first sale seeded it. */
  async counterStock(skuName: string): Promise<number | null> {
    const value = await this.redis.get(redisKeys.benchStock(skuName));
    return value === null ? null : Number(value);
  }

  /** The order and its ledger row in one statement with `step` (the CTE `done`), written only if it returned a row. */
  private async withOrderAndLedger(sale: BenchSale, step: RawBuilder<unknown>, fence: number | null = 0) {
    const { rows } = await sql<{ order_id: string }>`
    with done as (${step}),
    placed as (
      insert into orders (id, sku_id, quantity) select ${sale.orderId}::uuid, ${sale.skuId}, ${sale.quantity} from done limit 1
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, ${fence ?? 0} from placed
    returning order_id`.execute(this.db);
    return rows.length === 1;
  }

  private async availableOf(skuId: number): Promise<number> {
    const { rows } = await sql<{ available: string }>`
      select coalesce(sum(available), 0) as available from stock_segments where sku_id = ${skuId}`.execute(this.db);
    return Number(rows[0]!.available);
  }

  private sku(name: string) {
    const columns = ['id', 'sku', 'segment_count', 'layout_version'] as const;
    const read = async () => {
      const row = await this.db.selectFrom('skus').select(columns).where('sku', '=', name).executeTakeFirst();
      if (!row) throw new AppError('sku_not_found', `SKU '${name}' does not exist`);
      return { id: row.id, sku: row.sku, segments: row.segment_count, version: row.layout_version };
    };
    let entry = this.skus.get(name);
    if (!entry) {
      this.skus.set(name, (entry = read()));
      entry.catch(() => this.skus.delete(name));
    }
    return entry;
  }
}
