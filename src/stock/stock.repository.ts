import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, SkuRow, StockChangeKind } from '../db/schema.js';
import { FENCE_GUARD } from '../inventory/fence-guard.js';

export interface SkuStock {
  sku: SkuRow;
  segments: { segment: number; available: number }[];
  /** Units in live reservations. */
  reserved: number;
  /** Units of confirmed orders. */
  sold: number;
}

/** Locks the SKU row for the rest of the transaction, so configuration changes apply one at a time. */
export function findSkuForUpdate(trx: Transaction<Database>, skuId: number): Promise<SkuRow | undefined> {
  return trx.selectFrom('skus').selectAll().where('id', '=', skuId).forUpdate().executeTakeFirst();
}

export async function insertSku(
  trx: Transaction<Database>,
  values: {
    sku: string;
    segmentShares: number[];
    totalStock: number;
    maxPerCustomer: number | null;
    saleStartsAt?: Date | null;
    saleEndsAt?: Date | null;
    lowStockThreshold?: number | null;
  },
): Promise<SkuRow> {
  const row = await trx
    .insertInto('skus')
    .values({
      sku: values.sku,
      segment_count: values.segmentShares.length,
      total_stock: values.totalStock,
      max_per_customer: values.maxPerCustomer,
      sale_starts_at: values.saleStartsAt ?? null,
      sale_ends_at: values.saleEndsAt ?? null,
      low_stock_threshold: values.lowStockThreshold ?? null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  await insertSegments(trx, row.id, row.layout_version, values.segmentShares);
  await recordAddition(trx, row.id, values.totalStock, 'create');
  return row;
}

export async function insertSegments(
  trx: Transaction<Database>,
  skuId: number,
  layoutVersion: number,
  shares: number[],
): Promise<void> {
  await trx
    .insertInto('stock_segments')
    .values(shares.map((available, segment) => ({ sku_id: skuId, segment, layout_version: layoutVersion, available })))
    .execute();
}

export async function recordAddition(
  trx: Transaction<Database>,
  skuId: number,
  quantity: number,
  reason: 'create' | 'restock',
): Promise<void> {
  await trx.insertInto('stock_additions').values({ sku_id: skuId, quantity, kind: reason, reason }).execute();
}

/** A change of a SKU's stock made under every segment lock: an adjustment or a counted set. */
export interface StockChange {
  kind: Extract<StockChangeKind, 'adjustment' | 'count'>;
  /** Signed units added (negative: removed). */
  quantity: number;
  reason: string;
  actor: string;
  note: string | null;
  reference: string | null;
  availableAfter: number;
}

/** Logs an adjustment or a count in `stock_additions`; answers its id and when it was written. */
export async function recordStockChange(
  trx: Transaction<Database>,
  skuId: number,
  change: StockChange,
): Promise<{ id: number; createdAt: Date }> {
  const row = await trx
    .insertInto('stock_additions')
    .values({
      sku_id: skuId,
      quantity: change.quantity,
      kind: change.kind,
      reason: change.reason,
      actor: change.actor,
      note: change.note,
      reference: change.reference,
      available_after: change.availableAfter,
    })
    .returning(['id', 'created_at'])
    .executeTakeFirstOrThrow();
  return { id: Number(row.id), createdAt: row.created_at };
}

/**
 * The available units of a layout's segments, row-locked for the rest of the transaction: a writer whose lock has
 * expired waits, then finds the fence moved on by this transaction's fenced write.
 */
export async function readSegmentsForUpdate(
  trx: Transaction<Database>,
  ref: { skuId: number; layoutVersion: number },
): Promise<{ segment: number; available: number }[]> {
  const rows = await trx
    .selectFrom('stock_segments')
    .select(['segment', 'available'])
    .where('sku_id', '=', ref.skuId)
    .where('layout_version', '=', ref.layoutVersion)
    .orderBy('segment')
    .forUpdate()
    .execute();
  return rows.map((row) => ({ segment: row.segment, available: Number(row.available) }));
}

export interface FencedWrite {
  segment: number;
  fence: number;
}

/**
 * Adds stock to segments under their locks (restock, adjustments and counts: `add` may be negative, never below what
 * the segment holds); returns how many rows the fence let through.
 */
export async function addToSegmentsFenced(
  trx: Transaction<Database>,
  ref: { skuId: number; layoutVersion: number },
  writes: (FencedWrite & { add: number })[],
): Promise<number> {
  const result = await sql`
    update stock_segments s
       set available = s.available + w.add, fence_token = w.fence
      from unnest(${writes.map((w) => w.segment)}::int[], ${writes.map((w) => w.fence)}::bigint[],
                  ${writes.map((w) => w.add)}::bigint[]) as w(segment, fence, add)
     where s.sku_id = ${ref.skuId} and s.layout_version = ${ref.layoutVersion}
       and s.segment = w.segment and ${sql.raw(FENCE_GUARD)}`.execute(trx);
  return Number(result.numAffectedRows ?? 0);
}

/**
 * Removes a layout's segments under their locks (re-segmentation); returns the stock they held, and the units of
 * confirmed orders and live reservations taken from them.
 */
export async function deleteSegmentsFenced(
  trx: Transaction<Database>,
  ref: { skuId: number; layoutVersion: number },
  writes: FencedWrite[],
): Promise<{ segment: number; available: number; sold: number; reserved: number }[]> {
  const result = await sql<{ segment: number; available: number; sold: number; reserved: number }>`
    delete from stock_segments s
     using unnest(${writes.map((w) => w.segment)}::int[], ${writes.map((w) => w.fence)}::bigint[]) as w(segment, fence)
     where s.sku_id = ${ref.skuId} and s.layout_version = ${ref.layoutVersion}
       and s.segment = w.segment and ${sql.raw(FENCE_GUARD)}
    returning s.segment, s.available, s.sold, s.reserved`.execute(trx);
  return result.rows.map((row) => ({
    segment: row.segment,
    available: Number(row.available),
    sold: Number(row.sold),
    reserved: Number(row.reserved),
  }));
}

export async function updateSkuLayout(
  trx: Transaction<Database>,
  skuId: number,
  values: {
    segmentCount?: number;
    layoutVersion?: number;
    totalStock?: number;
    soldInEarlierLayouts?: number;
    reservedInEarlierLayouts?: number;
    maxPerCustomer?: number | null;
    saleStartsAt?: Date | null;
    saleEndsAt?: Date | null;
    lowStockThreshold?: number | null;
  },
): Promise<void> {
  await trx
    .updateTable('skus')
    .set({
      ...(values.segmentCount !== undefined && { segment_count: values.segmentCount }),
      ...(values.layoutVersion !== undefined && { layout_version: values.layoutVersion }),
      ...(values.totalStock !== undefined && { total_stock: values.totalStock }),
      ...(values.soldInEarlierLayouts !== undefined && { sold_in_earlier_layouts: values.soldInEarlierLayouts }),
      ...(values.reservedInEarlierLayouts !== undefined && {
        reserved_in_earlier_layouts: values.reservedInEarlierLayouts,
      }),
      ...(values.maxPerCustomer !== undefined && { max_per_customer: values.maxPerCustomer }),
      ...(values.saleStartsAt !== undefined && { sale_starts_at: values.saleStartsAt }),
      ...(values.saleEndsAt !== undefined && { sale_ends_at: values.saleEndsAt }),
      ...(values.lowStockThreshold !== undefined && { low_stock_threshold: values.lowStockThreshold }),
      updated_at: new Date(),
    })
    .where('id', '=', skuId)
    .execute();
}

/** Units of the SKU's confirmed reservations (Σ of its few counter rows), as a column of a query on `skus`. */
const confirmedReservationUnits = sql<number>`(select coalesce(sum(units), 0) from reservation_confirmations c
  where c.sku_id = skus.id)::bigint`;

/**
 * A SKU with its segments' stock and the units it has reserved and sold, in one statement: one snapshot and one round
 * trip. Running totals, not the ledger: O(segments) however many orders the SKU has had.
 */
export async function readSkuStock(db: Db, sku: string): Promise<SkuStock | undefined> {
  const rows = await db
    .selectFrom('skus')
    .leftJoin('stock_segments', 'stock_segments.sku_id', 'skus.id')
    .selectAll('skus')
    .select(['stock_segments.segment', 'stock_segments.available', 'stock_segments.sold', 'stock_segments.reserved'])
    .select(confirmedReservationUnits.as('confirmed_reservations'))
    .where('skus.sku', '=', sku)
    .orderBy('stock_segments.segment')
    .execute();
  if (rows.length === 0) return undefined;
  const {
    segment: _segment,
    available: _available,
    sold: _sold,
    reserved: _reserved,
    confirmed_reservations: confirmed,
    ...row
  } = rows[0]!;
  const segments = rows.flatMap(({ segment, available }) =>
    segment === null || available === null ? [] : [{ segment, available }],
  );
  // A confirmed reservation's units stay in `reserved` on the segments; its confirmation is counted apart.
  const sold = row.sold_in_earlier_layouts + rows.reduce((total, r) => total + (r.sold ?? 0), 0) + confirmed;
  const reserved =
    row.reserved_in_earlier_layouts + rows.reduce((total, r) => total + (r.reserved ?? 0), 0) - confirmed;
  return { sku: row, segments, reserved, sold };
}
