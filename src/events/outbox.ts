import { sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.js';
import type { EventType } from './event-types.js';

/** One event of a change: its SKU, type and details, and what the change did to the SKU's totals. */
export interface OutboxEvent {
  skuId: number;
  type: EventType;
  data: Record<string, unknown>;
  available?: number;
  reserved?: number;
  sold?: number;
}

/**
 * Writes a change's events into `event_outbox` inside the change's own transaction, so they commit or roll back with
 * it. (The order statement writes its `order.placed` events itself, in the same way: src/inventory/order-writes.ts.)
 * The sequencer (./sequencer.ts) later gives them their place in the feed. Off (EVENTS=off), nothing is written.
 */
export class Outbox {
  constructor(readonly enabled: boolean) {}

  async write(trx: Transaction<Database>, events: readonly OutboxEvent[]): Promise<void> {
    if (!this.enabled || events.length === 0) return;
    await trx
      .insertInto('event_outbox')
      .values(
        events.map((e) => ({
          sku_id: e.skuId,
          type: e.type,
          data: sql`${JSON.stringify(e.data)}::jsonb`,
          d_available: e.available ?? 0,
          d_reserved: e.reserved ?? 0,
          d_sold: e.sold ?? 0,
        })),
      )
      .execute();
  }
}
