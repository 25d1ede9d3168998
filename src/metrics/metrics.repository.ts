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

/** Lines shown at most: the gauges' series stay bounded whatever the number of lines ever made. */
const LINES_SHOWN = 1000;
/** How long a finished line (sold out, or its sale window over) stays on the gauges, so its end is on the graphs. */
const FINISHED_LINE_SHOWN_MS = 3_600_000;

/** A line's figures as the gauges show them: `waiting` counts as GET /skus/:sku/line does. */
export interface LineFigures {
  sku: string;
  tickets: number;
  waiting: number;
  soldOutAt: Date | null;
}

/**
 * The lines still selling, and those finished within the last hour, by the shared clock's `now`; newest 1,000.
 * `waiting`: the pre-line before the draw, then the tickets numbered and not let through (after the sold-out moment,
 * those told sold out).
 */
export async function readLineFigures(db: Db, now: Date): Promise<LineFigures[]> {
  const recent = new Date(now.getTime() - FINISHED_LINE_SHOWN_MS);
  const { rows } = await sql<LineFigures>`
    select k.sku, l.tickets,
           (case when l.drawn_at is null then l.pre_line_tickets else l.numbers_given - l.admitted_through end)::int
             as waiting,
           l.sold_out_at as "soldOutAt"
      from sku_lines l join skus k on k.id = l.sku_id
     where (l.sold_out_at is null or l.sold_out_at > ${recent}) and (k.sale_ends_at is null or k.sale_ends_at > ${recent})
     order by l.sku_id desc
     limit ${LINES_SHOWN}`.execute(db);
  return rows;
}
