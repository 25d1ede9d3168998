import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { findOrder, type OrderRecord } from './order.repository.js';

/** Reading orders back (placing them is the order flow's: src/inventory/order-placement.ts). */
export class OrderService {
  constructor(private readonly db: Db) {}

  /** The order with this id; throws order_not_found. */
  async get(id: string): Promise<OrderRecord> {
    const order = await findOrder(this.db, { id });
    if (!order) throw new AppError('order_not_found', `order '${id}' does not exist`);
    return order;
  }
}
