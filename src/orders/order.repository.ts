import type { Kysely, Transaction } from 'kysely';
import type { Database } from '../db/schema.js';

type Executor = Kysely<Database> | Transaction<Database>;

export interface OrderRecord {
  id: string;
  sku: string;
  quantity: number;
  idempotencyKey: string | null;
  requestFingerprint: string | null;
  createdAt: Date;
  deductions: { segment: number; quantity: number }[];
}

export function isIdempotencyConflict(error: unknown): boolean {
  const pgError = error as { code?: string; constraint?: string };
  return pgError.code === '23505' && pgError.constraint === 'orders_idempotency_key_key';
}

export async function findOrder(
  db: Executor,
  by: { id: string } | { idempotencyKey: string },
): Promise<OrderRecord | undefined> {
  let query = db
    .selectFrom('orders')
    .innerJoin('skus', 'skus.id', 'orders.sku_id')
    .select([
      'orders.id',
      'skus.sku',
      'orders.quantity',
      'orders.idempotency_key',
      'orders.request_fingerprint',
      'orders.created_at',
    ]);
  query =
    'id' in by ? query.where('orders.id', '=', by.id) : query.where('orders.idempotency_key', '=', by.idempotencyKey);
  const order = await query.executeTakeFirst();
  if (!order) return undefined;
  const deductions = await db
    .selectFrom('stock_deductions')
    .select(['segment', 'quantity'])
    .where('order_id', '=', order.id)
    .orderBy('segment')
    .execute();
  return {
    id: order.id,
    sku: order.sku,
    quantity: order.quantity,
    idempotencyKey: order.idempotency_key,
    requestFingerprint: order.request_fingerprint,
    createdAt: order.created_at,
    deductions,
  };
}
