import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { GrowthCase } from '../results.js';
import { runRound } from '../runner/round.js';
import type { RunContext } from './context.js';
import { settle } from './sales.js';

/** Rows seeded per statement: big enough to be quick, small enough to finish well within the query timeout (10 s). */
const SEED_CHUNK = 100_000;
/** Units each segment keeps beyond the seeded sales, for the order round. */
const HEADROOM_PER_SEGMENT = 100_000;

/**
 * Cost as the ledger grows: the SKU view (`GET /skus/:sku`) and one-unit orders, on a SKU with an empty ledger and
 * on one whose ledger holds `ledgerRows` sales, seeded in bulk straight in Postgres through SQL that keeps the
 * running totals consistent (each segment's available and sold move with the rows added), so the books still audit.
 */
export async function runGrowth(
  ctx: RunContext,
  db: Db,
  service: ServiceTarget,
  spec: { segments: number; ledgerRows: number[] },
): Promise<GrowthCase[]> {
  const api = ctx.api(service);
  const cases: GrowthCase[] = [];
  for (const rows of spec.ledgerRows) {
    const sku = ctx.skuName(`growth-${rows}`);
    await api.createSku(sku, rows + HEADROOM_PER_SEGMENT * spec.segments, spec.segments);
    const started = performance.now();
    await seedLedger(ctx, db, sku, rows, spec.segments);
    const seedSeconds = (performance.now() - started) / 1000;
    const view = await api.sku(sku);
    if (view.sold !== rows) throw new Error(`seeding ${sku}: the SKU view says ${view.sold} sold, expected ${rows}`);

    const label = `ledger of ${rows.toLocaleString('en-US')} rows`;
    const round = (title: string, method: 'GET' | 'POST', path: string, expected: number) =>
      runRound(
        {
          title: `${label} · ${title}`,
          baseUrl: service.url,
          method,
          path,
          body: method === 'POST' ? { sku, quantity: 1 } : undefined,
          connections: ctx.settings.growthConnections,
          amount: ctx.settings.growthRequests,
          timeoutSeconds: ctx.settings.timeoutSeconds,
        },
        expected,
        ctx.progress,
      );
    await ctx.waitForQuiet(service);
    const skuRead = await round('GET /skus/:sku', 'GET', `/skus/${encodeURIComponent(sku)}`, 200);
    const orders = await round('POST /orders', 'POST', '/orders', 201);
    await settle(service, ctx.settings.timeoutSeconds);
    const after = await api.sku(sku);
    cases.push({
      id: `growth-${rows}`,
      label,
      ledgerRows: rows,
      seedSeconds,
      skuRead,
      orders,
      booksOk: after.sold === rows + (orders.statusCounts[201] ?? 0) && after.available + after.sold === after.stock,
    });
  }
  return cases;
}

/** `rows` one-unit sales of the SKU, spread evenly over its segments, with their orders, ledger rows and totals. */
async function seedLedger(ctx: RunContext, db: Db, sku: string, rows: number, segments: number): Promise<void> {
  const { id } = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
  for (let done = 0; done < rows; done += SEED_CHUNK) {
    const chunk = Math.min(SEED_CHUNK, rows - done);
    ctx.progress.note(
      `seeding ${sku}: ${(done + chunk).toLocaleString('en-US')} of ${rows.toLocaleString('en-US')} ledger rows…`,
    );
    await sql`
      with placed as (
        insert into orders (id, sku_id, quantity, created_at)
        select gen_random_uuid(), ${id}, 1, now() from generate_series(1, ${chunk})
        returning id
      ), ledger as (
        insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
        select id, ${id}, (row_number() over ()) % ${segments}, 1, 1, 0 from placed
        returning segment
      )
      update stock_segments s
         set available = s.available - c.sold, sold = s.sold + c.sold
        from (select segment, count(*) as sold from ledger group by segment) c
       where s.sku_id = ${id} and s.layout_version = 1 and s.segment = c.segment`.execute(db);
  }
  await sql`analyze orders, stock_deductions`.execute(db);
}
