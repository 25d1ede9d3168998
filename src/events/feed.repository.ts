import type { Db } from '../db/database.js';
import type { EventType, StockEvent } from './event-types.js';

export interface FeedQuery {
  /** Events after this position (0: from the oldest kept). */
  after: number;
  /** And at or before this one. */
  upTo?: number | undefined;
  sku?: string | undefined;
  types?: readonly EventType[] | undefined;
  skus?: readonly string[] | null | undefined;
  limit: number;
}

/**
 * A page of the feed, oldest first. One index range scan whatever the history's length: by position (the primary
 * key), or by SKU then position (`events_sku_idx`) when one SKU is asked.
 */
export async function readEvents(db: Db, query: FeedQuery): Promise<StockEvent[]> {
  let select = db
    .selectFrom('events')
    .select(['position', 'type', 'sku', 'sequence', 'occurred_at', 'data'])
    .where('position', '>', query.after)
    .orderBy('position')
    .limit(query.limit);
  if (query.upTo !== undefined) select = select.where('position', '<=', query.upTo);
  if (query.sku !== undefined) select = select.where('sku', '=', query.sku);
  if (query.skus) select = select.where('sku', 'in', query.skus);
  if (query.types) select = select.where('type', 'in', query.types);
  return (await select.execute()).map(toEvent);
}

function toEvent(row: {
  position: number;
  type: string;
  sku: string;
  sequence: number;
  occurred_at: Date;
  data: unknown;
}): StockEvent {
  return {
    id: String(row.position),
    type: row.type as EventType,
    sku: row.sku,
    sequence: row.sequence,
    occurredAt: row.occurred_at.toISOString(),
    data: row.data as StockEvent['data'],
  };
}

/** The newest position given so far (0 before the first event). */
export async function headPosition(db: Db): Promise<number> {
  const row = await db.selectFrom('event_sequencer').select('last_position').where('id', '=', 1).executeTakeFirst();
  return row?.last_position ?? 0;
}

/**
 * The SKU's `sku.*` events (created, restocked, re-segmented, sale opened or closed, low stock, sold out, back in
 * stock) since `since`, newest first, at most `limit`: the sale's timeline the dashboard marks on its charts. A scan
 * of the partial index `events_sku_timeline_idx`, which holds no order events, so a sale's orders cost it nothing.
 */
export async function skuTimeline(db: Db, sku: string, since: Date, limit: number): Promise<StockEvent[]> {
  const rows = await db
    .selectFrom('events')
    .select(['position', 'type', 'sku', 'sequence', 'occurred_at', 'data'])
    .where('sku', '=', sku)
    .where('type', 'like', 'sku.%')
    .where('occurred_at', '>=', since)
    .orderBy('position', 'desc')
    .limit(limit)
    .execute();
  return rows.map(toEvent);
}
