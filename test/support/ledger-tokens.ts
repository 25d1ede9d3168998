import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

/**
 * The largest step between consecutive fencing tokens written to one segment, in commit order. Tokens normally rise
 * by one per lock holder; a Redis that lost its counters reseeds them from its clock in microseconds, which shows up
 * here as a jump of about the time elapsed since the counter was first seeded.
 */
export async function largestTokenStep(db: Db, sku: string): Promise<number> {
  const { rows } = await sql<{ step: string | null }>`
    select max(step)::text as step from (
      select fence_token - lag(fence_token) over (partition by segment, layout_version order by fence_token) as step
        from stock_deductions where sku_id = (select id from skus where sku = ${sku})
    ) steps`.execute(db);
  return Number(rows[0]?.step ?? 0);
}
