import { type Kysely, sql, type Transaction } from 'kysely';
import type { Database, OrderStatus } from '../db/schema.js';

type Executor = Kysely<Database> | Transaction<Database>;

/** What an order took from one SKU: its units, and the segments they came from. */
export interface OrderItem {
  sku: string;
  quantity: number;
  deductions: { segment: number; quantity: number }[];
}

export interface OrderRecord {
  id: string;
  status: OrderStatus;
  customerId: string | null;
  /** One per SKU, in SKU order. */
  items: OrderItem[];
  idempotencyKey: string | null;
  requestFingerprint: string | null;
  createdAt: Date;
  /** When a reservation lapses; null for other statuses. */
  expiresAt: Date | null;
}

const orderColumns = [
  'orders.id',
  'orders.status',
  'orders.customer_id',
  'orders.idempotency_key',
  'orders.request_fingerprint',
  'orders.created_at',
  'orders.expires_at',
] as const;

export async function findOrder(
  db: Executor,
  by: { id: string } | { idempotencyKey: string },
): Promise<OrderRecord | undefined> {
  let query = db.selectFrom('orders').select(orderColumns);
  query =
    'id' in by ? query.where('orders.id', '=', by.id) : query.where('orders.idempotency_key', '=', by.idempotencyKey);
  const row = await query.executeTakeFirst();
  if (!row) return undefined;
  return (await withItems(db, [row]))[0];
}

/** A page of a customer's orders, newest first; `after` is the id of the last order of the previous page. */
export async function listCustomerOrders(
  db: Executor,
  customerId: string,
  page: { limit: number; after?: string },
): Promise<OrderRecord[]> {
  let query = db
    .selectFrom('orders')
    .select(orderColumns)
    .where('orders.customer_id', '=', customerId)
    .orderBy('orders.created_at', 'desc')
    .orderBy('orders.id', 'desc')
    .limit(page.limit);
  if (page.after) {
    // Compared with the stored timestamp itself, to the microsecond, rather than a rounded copy of it.
    query = query.where(
      sql<boolean>`(orders.created_at, orders.id) < (select created_at, id from orders where id = ${page.after}::uuid)`,
    );
  }
  return withItems(db, await query.execute());
}

type OrderRow = {
  id: string;
  status: OrderStatus;
  customer_id: string | null;
  idempotency_key: string | null;
  request_fingerprint: string | null;
  created_at: Date;
  expires_at: Date | null;
};

/** The orders with their items, read from their ledger rows in one query. */
async function withItems(db: Executor, rows: OrderRow[]): Promise<OrderRecord[]> {
  if (rows.length === 0) return [];
  const ledger = await db
    .selectFrom('stock_deductions')
    .innerJoin('skus', 'skus.id', 'stock_deductions.sku_id')
    .select(['stock_deductions.order_id', 'skus.sku', 'stock_deductions.segment', 'stock_deductions.quantity'])
    .where(
      'stock_deductions.order_id',
      'in',
      rows.map((row) => row.id),
    )
    .orderBy('skus.sku')
    .orderBy('stock_deductions.segment')
    .execute();
  const itemsOf = new Map<string, OrderItem[]>();
  for (const { order_id, sku, segment, quantity } of ledger) {
    const items = itemsOf.get(order_id) ?? [];
    itemsOf.set(order_id, items);
    let item = items.at(-1);
    if (item?.sku !== sku) {
      item = { sku, quantity: 0, deductions: [] };
      items.push(item);
    }
    item.quantity += quantity;
    item.deductions.push({ segment, quantity });
  }
  return rows.map((row) => ({
    id: row.id,
    status: row.status,
    customerId: row.customer_id,
    items: itemsOf.get(row.id) ?? [],
    idempotencyKey: row.idempotency_key,
    requestFingerprint: row.request_fingerprint,
    createdAt: row.created_at,
    expiresAt: row.status === 'reserved' ? row.expires_at : null,
  }));
}
