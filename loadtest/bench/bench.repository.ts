import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

/** One sale as the benchmark routes write it: the order row and its single ledger row. */
export interface BenchSale {
  orderId: string;
  skuId: number;
  layoutVersion: number;
  segment: number;
  quantity: number;
}

/**
 * The lock-free baseline: one statement that deducts only if enough stock is there (`available >= q`, decided by
 * Postgres under its row lock) and writes the order and its ledger row. False when the segment was short.
 */
export async function sellIfAvailable(db: Db, sale: BenchSale): Promise<boolean> {
  const { rows } = await sql<{ order_id: string }>`
    with taken as (
      update stock_segments set available = available - ${sale.quantity}, sold = sold + ${sale.quantity}
       where sku_id = ${sale.skuId} and layout_version = ${sale.layoutVersion} and segment = ${sale.segment}
         and available >= ${sale.quantity}
      returning sku_id),
    placed as (
      insert into orders (id, sku_id, quantity) select ${sale.orderId}::uuid, sku_id, ${sale.quantity} from taken
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, 0 from placed
    returning order_id`.execute(db);
  return rows.length === 1;
}

/**
 * The write half of a read-decide-write: stores the stock the caller computed from its earlier read. With `fence`
 * the write applies only if no later lock holder wrote the row (the product's rule); without it, it applies blindly,
 * which is what loses updates when nothing serialises the callers. False when the fence refused the write.
 */
export async function writeDecidedSale(
  db: Db,
  sale: BenchSale & { availableAfter: number; fence: number | null },
): Promise<boolean> {
  const fenceGuard = sale.fence === null ? sql`true` : sql`fence_token < ${sale.fence}`;
  const { rows } = await sql<{ order_id: string }>`
    with written as (
      update stock_segments
         set available = ${sale.availableAfter}, fence_token = ${sale.fence ?? sql`fence_token`},
             sold = sold + ${sale.quantity}
       where sku_id = ${sale.skuId} and layout_version = ${sale.layoutVersion} and segment = ${sale.segment}
         and ${fenceGuard}
      returning sku_id),
    placed as (
      insert into orders (id, sku_id, quantity) select ${sale.orderId}::uuid, sku_id, ${sale.quantity} from written
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, ${sale.fence ?? 0} from placed
    returning order_id`.execute(db);
  return rows.length === 1;
}

/**
 * The order, its ledger row and the segment's running total of units sold: for the baseline that keeps the stock
 * itself in Redis (the segment's `available` is not its truth there, but what it sold is).
 */
export async function recordSale(db: Db, sale: BenchSale): Promise<void> {
  await sql`
    with counted as (
      update stock_segments set sold = sold + ${sale.quantity}
       where sku_id = ${sale.skuId} and layout_version = ${sale.layoutVersion} and segment = ${sale.segment}
    ), placed as (
      insert into orders (id, sku_id, quantity) values (${sale.orderId}::uuid, ${sale.skuId}, ${sale.quantity})
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, 0 from placed`.execute(
    db,
  );
}

export interface BenchSegment {
  skuId: number;
  layoutVersion: number;
  segment: number;
}

export async function findBenchSku(db: Db, sku: string) {
  return db
    .selectFrom('skus')
    .select(['id', 'sku', 'segment_count', 'layout_version'])
    .where('sku', '=', sku)
    .executeTakeFirst();
}

/** The read half of a read-decide-write; undefined when the segment does not exist in that layout. */
export async function readSegmentStock(db: Db, ref: BenchSegment): Promise<number | undefined> {
  const row = await db
    .selectFrom('stock_segments')
    .select('available')
    .where('sku_id', '=', ref.skuId)
    .where('layout_version', '=', ref.layoutVersion)
    .where('segment', '=', ref.segment)
    .executeTakeFirst();
  return row === undefined ? undefined : Number(row.available);
}

export async function availableOfSku(db: Db, skuId: number): Promise<number> {
  const row = await db
    .selectFrom('stock_segments')
    .select((eb) => eb.fn.coalesce(eb.fn.sum<number>('available'), eb.lit(0)).as('available'))
    .where('sku_id', '=', skuId)
    .executeTakeFirstOrThrow();
  return Number(row.available);
}
