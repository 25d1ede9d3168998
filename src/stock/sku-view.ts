import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { readSkuStock } from './stock.repository.js';
import { isOnSale } from '../inventory/sale-window.js';
import type { SharedClock } from '../inventory/shared-clock.js';

/** A SKU's books: `available + reserved + sold = stock`. */
export interface SkuView {
  sku: string;
  segments: number;
  stock: number;
  available: number;
  /** Units in live reservations. */
  reserved: number;
  /** Units of confirmed orders. */
  sold: number;
  /** Most units one customer's live orders may hold; null: no limit. */
  maxPerCustomer: number | null;
  /** Available at or below this is announced as `sku.low_stock`; null: never. */
  lowStockThreshold: number | null;
  /** When orders open (inclusive) and close (exclusive), RFC 3339; null: open on that side. */
  saleStartsAt: string | null;
  saleEndsAt: string | null;
  /** Whether orders are taken now, by the shared clock. */
  onSale: boolean;
  segmentStock: { segment: number; available: number }[];
}

/** A SKU's books as GET /skus/:sku answers them; on sale or not by the shared clock. */
export async function readSkuView(db: Db, clock: SharedClock, sku: string): Promise<SkuView> {
  const stock = await readSkuStock(db, sku);
  if (!stock) throw new AppError('sku_not_found', `SKU '${sku}' does not exist`);
  const { sale_starts_at: startsAt, sale_ends_at: endsAt } = stock.sku;
  const window = { saleStartsAt: startsAt?.getTime() ?? null, saleEndsAt: endsAt?.getTime() ?? null };
  return {
    sku: stock.sku.sku,
    segments: stock.sku.segment_count,
    stock: stock.sku.total_stock,
    available: stock.segments.reduce((total, s) => total + s.available, 0),
    reserved: stock.reserved,
    sold: stock.sold,
    maxPerCustomer: stock.sku.max_per_customer,
    lowStockThreshold: stock.sku.low_stock_threshold,
    saleStartsAt: startsAt?.toISOString() ?? null,
    saleEndsAt: endsAt?.toISOString() ?? null,
    onSale: isOnSale(window, clock.now()),
    segmentStock: stock.segments,
  };
}
