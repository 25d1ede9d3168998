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

/**
 * Sales the product never makes, for the benchmark: the oversell demonstration (the order's critical section under
 * each guard; without a lock shared by every instance, two callers read the same stock and both sell it), and
 * lock-free designs a user might choose instead (a conditional UPDATE in Postgres, or a Redis counter with only the
 * ledger in Postgres). Each writes the same order and ledger rows as the product.
 */
export class UnguardedSales {
  /** SKU layouts: benchmark SKUs are created for one run and never re-segmented, so a layout read once stays true. */
  private readonly skus = new Map<
    string,
    Promise<{ id: number; sku: string; segments: number; layoutVersion: number }>
  >();
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
    const segment = { skuId: sku.id, layoutVersion: sku.layoutVersion, segment: 0 };
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
      const available = await readSegmentStock(this.db, segment);
      if (available === undefined) throw new AppError('sku_not_found', `SKU '${sku.sku}' has no segment 0`);
      if (available < quantity)
        throw new AppError('out_of_stock', `SKU '${sku.sku}' has ${available} unit(s) left, ${quantity} ordered`, {
          available,
        });
      if (this.options.criticalSectionDelayMs > 0) await sleep(this.options.criticalSectionDelayMs);
      const sale = { orderId: randomUUID(), ...segment, quantity, availableAfter: available - quantity, fence };
      if (!(await writeDecidedSale(this.db, sale)))
        throw new AppError('lock_busy', 'the segment lock was lost before the write; nothing was sold', {}, 1);
      return { orderId: sale.orderId, sku: sku.sku, quantity };
    } finally {
      await release();
    }
  }

  /** Tries the SKU's rows from a random one onwards; each try is one statement that deducts only if enough is there. */
  async sellConditional(skuName: string, quantity: number) {
    const sku = await this.sku(skuName);
    const start = Math.floor(Math.random() * sku.segments);
    for (let i = 0; i < sku.segments; i++) {
      const sale = { orderId: randomUUID(), skuId: sku.id, layoutVersion: sku.layoutVersion, quantity };
      if (await sellIfAvailable(this.db, { ...sale, segment: (start + i) % sku.segments }))
        return { orderId: sale.orderId, sku: sku.sku, quantity };
    }
    throw outOfStock(sku.sku, quantity, await availableOfSku(this.db, sku.id));
  }

  /** Stock in a Redis counter (seeded once from Postgres), decremented by a script; the ledger goes to Postgres. */
  async sellFromCounter(skuName: string, quantity: number) {
    const sku = await this.sku(skuName);
    const key = redisKeys.benchStock(sku.sku);
    let left = await this.takeStock(key, quantity);
    if (left === -2) {
      await this.redis.set(key, await availableOfSku(this.db, sku.id), 'NX');
      left = await this.takeStock(key, quantity);
    }
    if (left < 0) throw outOfStock(sku.sku, quantity, Number(await this.redis.get(key)));
    const orderId = randomUUID();
    // The ledger write failed: give the units back, or they would be neither sold nor available.
    await recordSale(this.db, { orderId, skuId: sku.id, layoutVersion: sku.layoutVersion, segment: 0, quantity }).catch(
      async (error: unknown) => {
        await this.redis.incrby(key, quantity).catch(() => {});
        throw error;
      },
    );
    return { orderId, sku: sku.sku, quantity };
  }

  /** The counter's stock, or null before the first sale seeded it. */
  async counterStock(skuName: string): Promise<number | null> {
    const value = await this.redis.get(redisKeys.benchStock(skuName));
    return value === null ? null : Number(value);
  }

  private sku(name: string) {
    let entry = this.skus.get(name);
    if (!entry) {
      entry = findBenchSku(this.db, name).then((row) => {
        if (!row) throw new AppError('sku_not_found', `SKU '${name}' does not exist`);
        return { id: row.id, sku: row.sku, segments: row.segment_count, layoutVersion: row.layout_version };
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

/** One sale as the benchmark routes write it: the order row and its single ledger row, on one segment. */
interface BenchSale {
  orderId: string;
  skuId: number;
  layoutVersion: number;
  segment: number;
  quantity: number;
}

/**
 * The order and its ledger row, written only if the statement's first step (`step`, a CTE named `done`) returned a
 * row; true when it did. One statement, so no caller ever sees the order without its ledger row.
 */
async function withOrderAndLedger(
  db: Db,
  sale: BenchSale,
  step: RawBuilder<unknown>,
  fence: number | null = 0,
): Promise<boolean> {
  const { rows } = await sql<{ order_id: string }>`
    with done as (${step}),
    placed as (
      insert into orders (id, sku_id, quantity) select ${sale.orderId}::uuid, ${sale.skuId}, ${sale.quantity} from done limit 1
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, ${fence ?? 0} from placed
    returning order_id`.execute(db);
  return rows.length === 1;
}

type SegmentRef = Pick<BenchSale, 'skuId' | 'layoutVersion' | 'segment'>;
const segmentOf = (sale: SegmentRef) =>
  sql`sku_id = ${sale.skuId} and layout_version = ${sale.layoutVersion} and segment = ${sale.segment}`;

/** The lock-free baseline: deducts only if enough stock is there (`available >= q`, decided under Postgres's row lock). */
function sellIfAvailable(db: Db, sale: BenchSale): Promise<boolean> {
  const q = sale.quantity;
  return withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments set available = available - ${q}, sold = sold + ${q}
    where ${segmentOf(sale)} and available >= ${q} returning sku_id`,
  );
}

/**
 * The write half of a read-decide-write: stores the stock the caller computed from its earlier read. With `fence` it
 * applies only if no later lock holder wrote the row (the product's rule); without, blindly, which is what loses
 * updates when nothing serialises the callers. False when the fence refused the write.
 */
function writeDecidedSale(
  db: Db,
  sale: BenchSale & { availableAfter: number; fence: number | null },
): Promise<boolean> {
  const fenced = sale.fence === null ? sql`true` : sql`fence_token < ${sale.fence}`;
  return withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments
    set available = ${sale.availableAfter}, fence_token = ${sale.fence ?? sql`fence_token`}, sold = sold + ${sale.quantity}
    where ${segmentOf(sale)} and ${fenced} returning sku_id`,
    sale.fence,
  );
}

/** The order, its ledger row and the segment's units sold: for the baseline that keeps the stock itself in Redis. */
async function recordSale(db: Db, sale: BenchSale): Promise<void> {
  await withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments set sold = sold + ${sale.quantity} where ${segmentOf(sale)} returning sku_id`,
  );
}

function findBenchSku(db: Db, sku: string) {
  return db
    .selectFrom('skus')
    .select(['id', 'sku', 'segment_count', 'layout_version'])
    .where('sku', '=', sku)
    .executeTakeFirst();
}

/** The read half of a read-decide-write; undefined when the segment does not exist in that layout. */
async function readSegmentStock(db: Db, ref: SegmentRef): Promise<number | undefined> {
  const { rows } = await sql<{
    available: string;
  }>`select available from stock_segments where ${segmentOf(ref)}`.execute(db);
  return rows[0] && Number(rows[0].available);
}

async function availableOfSku(db: Db, skuId: number): Promise<number> {
  const { rows } = await sql<{
    available: string;
  }>`select coalesce(sum(available), 0) as available from stock_segments where sku_id = ${skuId}`.execute(db);
  return Number(rows[0]!.available);
}
