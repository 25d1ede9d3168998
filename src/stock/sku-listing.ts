import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { isOnSale } from '../inventory/sale-window.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { SkuView } from './sku-view.js';
import { isStoredSkuName } from './sku-name.js';

/** A SKU in a list: its view without the segment list. */
export type SkuSummary = Omit<SkuView, 'segmentStock'>;

export interface SkuListQuery {
  limit: number;
  /** A `nextCursor` of an earlier page, asked with the same filters. */
  cursor?: string | undefined;
  /** Only SKUs whose name starts with this. */
  prefix?: string | undefined;
  /** true: only SKUs inside their sale window now (by the shared clock); false: only those outside it. */
  onSale?: boolean | undefined;
  /** true: only SKUs with nothing available; false: only those with something. */
  soldOut?: boolean | undefined;
  /** true: only SKUs with 0 < available ≤ lowStockThreshold; false: every other SKU. */
  lowStock?: boolean | undefined;
}

export interface SkuPage {
  skus: SkuSummary[];
  /** Where the next page starts; null once the list is done. */
  nextCursor: string | null;
}

/**
 * Most SKUs one filtered page looks at. A filter that few SKUs pass would otherwise walk the whole catalogue for one
 * page; bounded, a page costs the same however large the catalogue, and may hold fewer SKUs than asked (even none)
 * while a `nextCursor` still says where to look on.
 */
export const MAX_SKUS_SCANNED = 1_000;

interface ListedRow {
  sku: string;
  segment_count: number;
  total_stock: number;
  max_per_customer: number | null;
  low_stock_threshold: number | null;
  /** Milliseconds since the epoch: json_agg's text of a timestamp is not always one Date can parse (`… BC`). */
  sale_starts_at: number | null;
  sale_ends_at: number | null;
  available: number;
  reserved: number;
  sold: number;
}

/**
 * A page of SKUs in the order of their names (bytewise), after the cursor: keyset paging on the `sku collate "C"`
 * index, so a page costs the same wherever it starts, and SKUs created meanwhile neither shift nor repeat a page.
 * Each SKU's books come from its segments' running totals, as GET /skus/:sku reads them: O(segments) a SKU.
 */
export async function listSkus(db: Db, clock: SharedClock, query: SkuListQuery): Promise<SkuPage> {
  const now = new Date(clock.now());
  const { statement, scan, filtered } = listingStatement(query, now);
  const { items, scanned, last_scanned: lastScanned } = (await statement.execute(db)).rows[0]!;
  const listed = items ?? [];
  const shown = listed.slice(0, query.limit);
  let nextCursor: string | null = null;
  if (listed.length > query.limit) nextCursor = encodeCursor(shown.at(-1)!.sku);
  else if (filtered && scanned === scan && lastScanned !== null) nextCursor = encodeCursor(lastScanned);
  return { skus: shown.map((row) => summary(row, now.getTime())), nextCursor };
}

/**
 * The one statement of a page, at `now` by the shared clock: the SKUs matching the query, at most `limit + 1` (one
 * more tells whether another page follows), with how many SKUs it looked at (`scan` at most) and the last of them.
 */
export function listingStatement(query: SkuListQuery, now: Date) {
  const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  const filtered = query.onSale !== undefined || query.soldOut !== undefined || query.lowStock !== undefined;
  const scan = filtered ? MAX_SKUS_SCANNED : query.limit + 1;
  const conditions = [sql`true`];
  if (after !== undefined) conditions.push(sql`k.sku collate "C" > ${after}`);
  if (query.prefix !== undefined) {
    // Every character a SKU name may hold sorts below U+007F, so this bound ends the prefix's range.
    conditions.push(sql`k.sku collate "C" >= ${query.prefix} and k.sku collate "C" < ${query.prefix + '\x7f'}`);
  }
  const filters = [sql`true`];
  const onSaleNow = sql`(k.sale_starts_at is null or k.sale_starts_at <= ${now})
    and (k.sale_ends_at is null or k.sale_ends_at > ${now})`;
  const lowStock = sql`(t.available > 0 and t.available <= k.low_stock_threshold)`;
  if (query.onSale !== undefined) filters.push(query.onSale ? onSaleNow : sql`not (${onSaleNow})`);
  if (query.soldOut !== undefined) filters.push(query.soldOut ? sql`t.available = 0` : sql`t.available > 0`);
  if (query.lowStock !== undefined) filters.push(query.lowStock ? lowStock : sql`not coalesce(${lowStock}, false)`);

  const statement = sql<{ items: ListedRow[] | null; scanned: number; last_scanned: string | null }>`
    with scanned as materialized (
      select k.* from skus k
      where ${sql.join(conditions, sql` and `)}
      order by k.sku collate "C"
      limit ${scan}
    ),
    matches as (
      select k.sku, k.segment_count, k.total_stock, k.max_per_customer, k.low_stock_threshold,
             (extract(epoch from k.sale_starts_at) * 1000)::float8 as sale_starts_at,
             (extract(epoch from k.sale_ends_at) * 1000)::float8 as sale_ends_at, t.available,
             -- A confirmed reservation's units stay in the segments' reserved; its confirmation is counted apart.
             k.reserved_in_earlier_layouts + t.reserved - c.confirmed as reserved,
             k.sold_in_earlier_layouts + t.sold + c.confirmed as sold
      from scanned k
      cross join lateral (
        select coalesce(sum(s.available), 0)::bigint as available, coalesce(sum(s.reserved), 0)::bigint as reserved,
               coalesce(sum(s.sold), 0)::bigint as sold
        from stock_segments s where s.sku_id = k.id
      ) t
      cross join lateral (
        select coalesce(sum(r.units), 0)::bigint as confirmed from reservation_confirmations r where r.sku_id = k.id
      ) c
      where ${sql.join(filters, sql` and `)}
      order by k.sku collate "C"
      limit ${query.limit + 1}
    )
    select (select json_agg(m order by m.sku collate "C") from matches m) as items,
           (select count(*)::int from scanned) as scanned,
           (select max(k.sku collate "C") from scanned k) as last_scanned`;
  return { statement, scan, filtered };
}

function summary(row: ListedRow, now: number): SkuSummary {
  const startsAt = row.sale_starts_at === null ? null : new Date(row.sale_starts_at);
  const endsAt = row.sale_ends_at === null ? null : new Date(row.sale_ends_at);
  return {
    sku: row.sku,
    segments: row.segment_count,
    stock: row.total_stock,
    available: row.available,
    reserved: row.reserved,
    sold: row.sold,
    maxPerCustomer: row.max_per_customer,
    lowStockThreshold: row.low_stock_threshold,
    saleStartsAt: startsAt?.toISOString() ?? null,
    saleEndsAt: endsAt?.toISOString() ?? null,
    onSale: isOnSale({ saleStartsAt: startsAt?.getTime() ?? null, saleEndsAt: endsAt?.getTime() ?? null }, now),
  };
}

/** The cursor is opaque to clients: the last SKU name the page looked at, from which the next page goes on. */
function encodeCursor(sku: string): string {
  return Buffer.from(`s:${sku}`).toString('base64url');
}

/** Only a cursor this service could have given reaches SQL: `s:` and a stored SKU name, in its one encoding. */
function decodeCursor(cursor: string): string {
  const decoded = Buffer.from(cursor, 'base64url').toString();
  const sku = decoded.slice(2);
  if (!decoded.startsWith('s:') || !isStoredSkuName(sku) || encodeCursor(sku) !== cursor) {
    throw new AppError('bad_request', 'cursor: must be a nextCursor value');
  }
  return sku;
}
