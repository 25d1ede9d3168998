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
 * The one way into `event_outbox`, for every writer: `${OUTBOX_INSERT} <rows>`, where `rows` selects, in this order,
 * the SKU, the type, the details (jsonb), what the change did to available, reserved and sold, and when it occurred.
 * Each writer keeps its own select (a batch's placed orders in the order statement, a confirm's ledger rows, a sale
 * window's edges, a list of events here) and runs it in the change's own statement or transaction, so the events
 * commit or roll back with the change. Append-only: no writer updates a row of it, so none queues behind another. The
 * sequencer (./sequencer.ts) later gives the rows their place in the feed.
 */
export const OUTBOX_INSERT =
  'insert into event_outbox (sku_id, type, data, d_available, d_reserved, d_sold, occurred_at)';

/**
 * The instance's outbox, and the one place that knows whether events are written (EVENTS): a writer whose insert is
 * part of its own statement (OUTBOX_INSERT) asks `enabled`; `write` writes a list of events inside the change's own
 * transaction, and nothing when off.
 */
export class Outbox {
  constructor(readonly enabled: boolean) {}

  async write(trx: Transaction<Database>, events: readonly OutboxEvent[]): Promise<void> {
    if (!this.enabled || events.length === 0) return;
    await sql`${sql.raw(OUTBOX_INSERT)}
      select sku_id, type, data, d_available, d_reserved, d_sold, now()
        from unnest(${events.map((e) => e.skuId)}::int[], ${events.map((e) => e.type)}::text[],
                    ${events.map((e) => JSON.stringify(e.data))}::jsonb[], ${events.map((e) => e.available ?? 0)}::bigint[],
                    ${events.map((e) => e.reserved ?? 0)}::bigint[], ${events.map((e) => e.sold ?? 0)}::bigint[])
             as e(sku_id, type, data, d_available, d_reserved, d_sold)`.execute(trx);
  }
}
