import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { AppError } from '../../src/errors.js';
import type { SegmentLocks } from '../../src/inventory/segment-locks.js';
import { outOfStock } from '../../src/inventory/refusals.js';
import { redisKeys } from '../../src/lock/keys.js';
import type { RedisClient } from '../../src/redis/connections.js';

/** What guards the oversell demonstration's read-decide-write: nothing, a mutex in this process, or the segment lock. */
export const guardModes = ['none', 'local-mutex', 'redis-lock'] as const;
export type GuardMode = (typeof guardModes)[number];

/*
 * Checks and decrements a stock counter atomically: KEYS[1] the counter, ARGV[1] the quantity. Returns the stock left
 * (>= 0), -1 when short, -2 when the counter does not exist yet. Beside its only caller, a benchmark baseline; the
 * service's own scripts live in src/lock/lua.
 */
const takeStockLua = `
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
if tonumber(stock) < tonumber(ARGV[1]) then return -1 end
return redis.call('DECRBY', KEYS[1], ARGV[1])
`;

/** One sale as the benchmark routes write it: the order row and its single ledger row, on one segment. */
interface BenchSale {
  orderId: string;
  skuId: number;
  layoutVersion: number;
  segment: number;
  quantity: number;
}
type SegmentRef = Pick<BenchSale, 'skuId' | 'layoutVersion' | 'segment'>;
const segmentOf = (ref: SegmentRef) =>
  sql`sku_id = ${ref.skuId} and layout_version = ${ref.layoutVersion} and segment = ${ref.segment}`;

/**
 * Sales the product never makes, for the benchmark: the oversell demonstration (the order's critical section under
 * each guard; without a lock shared by every instance, two callers read the same stock and both sell it), and
 * lock-free designs a user might choose instead (a conditional UPDATE in Postgres, or a Redis counter with only the
 * ledger in Postgres). Each writes the same order and ledger rows as the product.
 */
export class UnguardedSales {
  /** SKU layouts: benchmark SKUs are created for one run and never re-segmented, so a layout read once stays true. */
  private readonly skus = new Map<string, Promise<{ id: number; sku: string; segments: number; version: number }>>();
  /** A process-local mutex per SKU, first come first served: a chain of the holders' promises. */
  private readonly mutexTails = new Map<string, Promise<void>>();
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
    if (mode === 'local-mutex') release = await this.lockLocally(sku.sku);
    else if (mode === 'redis-lock') {
      const lease = await this.locks.acquire({ sku: sku.sku, ...segment }, Date.now() + this.options.lockWaitMs);
      if (!lease) throw new AppError('lock_busy', `the segment stayed locked for ${this.options.lockWaitMs} ms`, {}, 1);
      fence = lease.fence;
      release = () => this.locks.releaseAll([lease]);
    }
    try {
      // The read half of the read-decide-write.
      const read = sql<{ available: string }>`select available from stock_segments where ${segmentOf(segment)}`;
      const [row] = (await read.execute(this.db)).rows;
      if (!row) throw new AppError('sku_not_found', `SKU '${sku.sku}' has no segment 0`);
      const available = Number(row.available);
      if (available < quantity)
        throw new AppError('out_of_stock', `SKU '${sku.sku}' has ${available} unit(s) left, ${quantity} ordered`, {
          available,
        });
      if (this.options.criticalSectionDelayMs > 0) await sleep(this.options.criticalSectionDelayMs);
      // The write half stores the stock computed from the read. With a fence it applies only if no later lock holder
      // wrote the row (the product's rule); without, blindly, which is what loses updates when nothing serialises
      // the callers. No row: the fence refused the write.
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

  /**
   * The lock-free Postgres baseline: tries the SKU's rows from a random one onwards; each try is one statement that
   * deducts only if enough is there (`available >= q`, decided under Postgres's row lock).
   */
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
    // The stock lives in Redis: the segment only counts the units sold.
    const count = sql`update stock_segments set sold = sold + ${quantity} where ${segmentOf(sale)} returning sku_id`;
    // The ledger write failed: give the units back, or they would be neither sold nor available.
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

  /**
   * The order and its ledger row, written only if the statement's first step (`step`, a CTE named `done`) returned a
   * row; true when it did. One statement, so no caller ever sees the order without its ledger row.
   */
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
    let entry = this.skus.get(name);
    if (!entry) {
      const columns = ['id', 'sku', 'segment_count', 'layout_version'] as const;
      entry = this.db
        .selectFrom('skus')
        .select(columns)
        .where('sku', '=', name)
        .executeTakeFirst()
        .then((row) => {
          if (!row) throw new AppError('sku_not_found', `SKU '${name}' does not exist`);
          return { id: row.id, sku: row.sku, segments: row.segment_count, version: row.layout_version };
        });
      this.skus.set(name, entry);
      entry.catch(() => this.skus.delete(name));
    }
    return entry;
  }

  /** The lock a single-instance service might use: it serialises callers inside one process, nothing across. */
  private async lockLocally(key: string): Promise<() => void> {
    const previous = this.mutexTails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const tail = previous.then(() => new Promise<void>((resolve) => (release = resolve)));
    this.mutexTails.set(key, tail);
    await previous;
    return () => {
      release();
      if (this.mutexTails.get(key) === tail) this.mutexTails.delete(key);
    };
  }
}
