import { sql } from 'kysely';
import type { Db } from '../db/database.js';

/**
 * The newest `limit` SKUs with their units available (Σ of their segments), newest first (a gauge series per SKU must
 * stay bounded). The SKUs come from the primary key backwards, each SKU's sum from its own segments: for a join and
 * grouping of both tables the planner may sum the segments of the whole catalogue before keeping `limit` of them (it
 * did, before the tables had statistics). Exported for the test of its plan.
 */
export function availableBySku(db: Db, limit: number) {
  return db
    .selectFrom('skus')
    .select((eb) => [
      'skus.sku',
      eb
        .selectFrom('stock_segments')
        .select((s) => s.fn.coalesce(s.fn.sum<number>('stock_segments.available'), s.lit(0)).as('available'))
        .whereRef('stock_segments.sku_id', '=', 'skus.id')
        .as('available'),
    ])
    .orderBy('skus.id', 'desc')
    .limit(limit);
}

export interface SkuAvailable {
  sku: string;
  available: number;
}

/** The newest `limit` SKUs' units available, for the per-SKU gauge and the dashboard. */
export async function readAvailableBySku(db: Db, limit: number): Promise<SkuAvailable[]> {
  const rows = await availableBySku(db, limit).execute();
  return rows.map((row) => ({ sku: row.sku, available: Number(row.available) }));
}

/** Rows of the outbox counted at most: the count stays cheap however far the sequencer fell behind. */
const OUTBOX_COUNTED = 100_000;

/** What waits in the outbox for the sequencer: rows (up to 100,000) and the age of the first in its order. */
export interface OutboxBacklog {
  rows: number;
  oldestAgeSeconds: number;
}

/** Reads the outbox's backlog along its primary key, the sequencer's own order: bounded, whatever waits. */
export async function readOutboxBacklog(db: Db): Promise<OutboxBacklog> {
  const { rows } = await sql<{ rows: number; age: number | null }>`
    select (select count(*) from (select 1 from event_outbox limit ${OUTBOX_COUNTED}) waiting)::int as rows,
           (select extract(epoch from now() - occurred_at) from event_outbox order by xid, id limit 1)::float8 as age`.execute(
    db,
  );
  const row = rows[0]!;
  return { rows: row.rows, oldestAgeSeconds: Math.max(0, row.age ?? 0) };
}
