import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { findOrder, listCustomerOrders, type OrderRecord } from './order.repository.js';

/** Reading orders back (placing and ending them is the order flow's: src/inventory/). */
export class OrderService {
  constructor(private readonly db: Db) {}

  /**
   * The order with this id; throws order_not_found. With `customerId`, another customer's order is not found either,
   * answered exactly as an unknown id, so that no caller can probe which ids exist.
   */
  async get(id: string, customerId?: string): Promise<OrderRecord> {
    const order = await findOrder(this.db, { id });
    if (!order || (customerId !== undefined && order.customerId !== customerId))
      throw new AppError('order_not_found', `order '${id}' does not exist`);
    return order;
  }

  /**
   * A customer's orders, newest first, `limit` a page. The cursor is opaque to clients: the last order's id, from
   * which the next page goes on, so pages stay stable while new orders arrive.
   */
  async listForCustomer(
    customerId: string,
    page: { limit: number; cursor?: string | undefined },
  ): Promise<{ orders: OrderRecord[]; nextCursor: string | null }> {
    const after = page.cursor === undefined ? undefined : decodeCursor(page.cursor);
    // One more than asked tells whether another page follows.
    const orders = await listCustomerOrders(this.db, customerId, { limit: page.limit + 1, ...(after && { after }) });
    const more = orders.length > page.limit;
    const shown = orders.slice(0, page.limit);
    return { orders: shown, nextCursor: more ? encodeCursor(shown.at(-1)!.id) : null };
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function encodeCursor(orderId: string): string {
  return Buffer.from(orderId).toString('base64url');
}

function decodeCursor(cursor: string): string {
  const id = Buffer.from(cursor, 'base64url').toString();
  if (!UUID.test(id)) throw new AppError('bad_request', 'cursor: must be a nextCursor value');
  return id;
}
