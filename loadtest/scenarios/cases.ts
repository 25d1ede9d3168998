/** The cases that are not one warm-up and one measured round of orders (sales.ts): each its own sequence. */
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RoundSpec } from '../runner/round.js';
import type { RunContext } from './context.js';
import { checkBooks, WARMUP_STOCK } from './sales.js';

export type CeilingCase = Awaited<ReturnType<typeof measureCeiling>>;
export type OversellCase = Awaited<ReturnType<typeof runOversell>>;
export type SoldOutCase = Awaited<ReturnType<typeof runRefusals>>;
export type LifecycleCase = Awaited<ReturnType<typeof runLifecycle>>;
export type DashboardCase = Awaited<ReturnType<typeof runDashboardCost>>;
export type GrowthCase = Awaited<ReturnType<typeof runGrowth>>[number];
export type RetentionCase = Awaited<ReturnType<typeof runEventRetention>>;

/**
 * The HTTP ceiling: the same stack answering POST /bench/echo with the order's body (200); or, with `path` and
 * `status`, another echo (the bare express app's POST /orders, 201).
 */
export async function measureCeiling(
  ctx: RunContext,
  spec: { id: string; label: string; service: ServiceTarget; instances: number; path?: string; status?: number },
) {
  const { id, label, service, instances, path, status = 200 } = spec;
  const body = { sku: 'ceiling', quantity: ctx.settings.quantity };
  const round = { title: label, path: path ?? '/bench/echo', body };
  const { warmup, measured, cpu } = await ctx.warmThenMeasure(service, round, status);
  const perSecond = measured.ratePerSecond[status] ?? 0;
  return { id, label, instances, warmup, measured, perSecond, cpu, ...(path && { path }) };
}

const guarded = (id: string, label: string, guard = id, path = `/bench/oversell/${id}`) => ({ id, label, guard, path });
/** Guards of the oversell demonstration: its unguarded benchmark routes, and the product's own POST /orders. */
export const guards = {
  none: guarded('none', 'no lock'),
  localMutex: guarded('local-mutex', 'process-local mutex'),
  redisLock: guarded('redis-lock', 'Redis segment lock'),
  product: guarded('product', 'the product, POST /orders', 'redis-lock', '/orders'),
};

/**
 * Reference article 000's experiment: a single-segment SKU, three times as many one-unit orders as it has stock, all
 * at once; then the books. Without a lock shared by every instance the ledger holds more than the stock went down by.
 */
export async function runOversell(
  ctx: RunContext,
  service: ServiceTarget,
  instances: number,
  guard: (typeof guards)['none'],
) {
  const stock = ctx.settings.oversellStock;
  const requests = stock * 3;
  const id = `oversell-${guard.id}-${instances}`;
  const sku = await ctx.createSku(service, id, stock, 1);
  const label = `oversell · ${guard.label} · ${instances} instance${instances > 1 ? 's' : ''}`;
  const connections = Math.min(ctx.settings.connections, requests);
  const body = { sku, quantity: 1 };
  const round = await ctx.round(service, { title: label, path: guard.path, body, connections, amount: requests });
  const books = await checkBooks(ctx.api(service), ctx.db, { sku, answeredUnits: round.statusCounts[201] ?? 0 });
  return { id, label, guard: guard.guard, path: guard.path, instances, stock, requests, round, books };
}

/**
 * Orders for a SKU that refuses them at once with 409, before any lock or query: one that sold out (one order per
 * segment, so the instance saw every segment empty), or one whose sale window opens tomorrow (`not_on_sale`, the
 * flood before a drop). Then the SKU is opened again — restocked, or its window opened now — and the very next order
 * must succeed.
 */
export async function runRefusals(
  ctx: RunContext,
  service: ServiceTarget,
  segments: number,
  why: 'sold-out' | 'not-on-sale',
) {
  const api = ctx.api(service);
  const soldOut = why === 'sold-out';
  const unitsPerSegment = 50;
  const window = soldOut ? {} : { saleStartsAt: new Date(Date.now() + 86_400_000).toISOString() };
  const sku = await ctx.createSku(service, `${why}-${segments}`, segments * unitsPerSegment, segments, window);
  for (let i = 0; soldOut && i < segments; i++) {
    const status = await api.order(sku, unitsPerSegment);
    if (status !== 201) throw new Error(`selling out ${sku}: order ${i} answered ${status}`);
  }
  const label = `${soldOut ? 'sold out' : 'not on sale yet'} · ${segments} segments`;
  const before = await ctx.scrape(service);
  const { warmup, measured, cpu } = await ctx.warmThenMeasure(
    service,
    { title: label, body: { sku, quantity: 1 } },
    409,
  );
  // The warm-up's attempts count too: there should be none at all.
  const attempts =
    (await ctx.scrape(service)).sum('stock_lock_attempts_total') - before.sum('stock_lock_attempts_total');
  const reopened = soldOut ? await api.restock(sku, 100) : await api.updateSku(sku, { saleStartsAt: null });
  const started = performance.now();
  const firstOrderStatus = await api.order(sku, 1);
  return {
    id: `${why}-${segments}`,
    label,
    why,
    segments,
    warmup,
    measured,
    refusalsPerSecond: measured.ratePerSecond[409] ?? 0,
    lockAttemptsPerRequest: measured.responses > 0 ? attempts / (measured.responses + warmup.responses) : null,
    cpu,
    reopen: {
      how: soldOut ? 'restock +100' : 'window opened',
      firstOrderStatus,
      firstOrderMs: performance.now() - started,
      availableAfter: reopened.available,
    },
  };
}

/**
 * What the lifecycle costs a shop: one-unit orders placed confirmed at once, against one-unit reservations each
 * confirmed by the next request of the same connection. Both rates count orders that ended confirmed.
 */
export async function runLifecycle(ctx: RunContext, service: ServiceTarget, segments: number) {
  const measure = async (kind: string, title: string, spec: Partial<RoundSpec>, status: number) => {
    const sku = await ctx.createSku(service, `lifecycle-${kind}-${segments}`, WARMUP_STOCK, segments);
    const body = { sku, quantity: 1, ...(spec.confirmEach && { holdSeconds: 600 }) };
    return ctx.warmThenMeasure(service, { ...spec, body, title: `${title} · ${segments} segments` }, status);
  };
  const direct = await measure('direct', 'place directly', {}, 201);
  const reserved = await measure('reserve', 'reserve then confirm', { confirmEach: true }, 200);
  return {
    id: `lifecycle-${segments}`,
    label: `${segments} segments`,
    segments,
    direct: direct.measured,
    reserveThenConfirm: reserved.measured,
    directPerSecond: direct.measured.ratePerSecond[201] ?? 0,
    confirmedPerSecond: reserved.measured.ratePerSecond[200] ?? 0,
    cpuDirect: direct.cpu,
    cpuReserveThenConfirm: reserved.cpu,
  };
}

/**
 * What open dashboards cost the order path: the same measured round of one-unit orders on one SKU with no dashboard
 * watching, then with `watchers` event streams open on that SKU, then without again.
 */
export async function runDashboardCost(ctx: RunContext, service: ServiceTarget, segments: number, watchers: number) {
  const sku = await ctx.createSku(service, 'dashboard', WARMUP_STOCK, segments);
  const body = { sku, quantity: ctx.settings.quantity };
  const first = { title: 'dashboard cost · no dashboard', body };
  const { measured: unwatched } = await ctx.warmThenMeasure(service, first, 201);
  const round = async (label: string) => {
    await ctx.settle(service);
    const title = `dashboard cost · ${label}`;
    return { label, round: await ctx.round(service, { title, body, amount: unwatched.responses }) };
  };
  const streams = Array.from({ length: watchers }, () => new AbortController());
  const events = streams.map(() => 0);
  const headers = ctx.api(service).adminHeaders;
  await Promise.all(
    streams.map(async (controller, i) => {
      const url = `${service.url}/dashboard/events?sku=${sku}`;
      const response = await fetch(url, { headers, signal: controller.signal });
      void (async () => {
        for await (const _chunk of response.body!) events[i]!++;
      })().catch(() => {}); // Aborted at the end of the round.
    }),
  );
  const watched = await round(`${watchers} dashboards watching`);
  for (const controller of streams) controller.abort();
  const again = await round('no dashboard again');
  return {
    watchers,
    rounds: [{ label: 'no dashboard', round: unwatched }, watched, again],
    minEventsPerWatcher: Math.min(...events),
  };
}

/**
 * Cost as the ledger grows: the SKU view and one-unit orders on a SKU with an empty ledger and on ones whose ledger
 * holds `ledgerRows` sales, seeded in bulk through SQL that keeps the running totals consistent, so the books audit.
 */
export async function runGrowth(ctx: RunContext, db: Db, service: ServiceTarget, segments: number) {
  const api = ctx.api(service);
  const cases = [];
  for (const rows of ctx.settings.growthLedgerRows) {
    const sku = await ctx.createSku(service, `growth-${rows}`, rows + 100_000 * segments, segments);
    const started = performance.now();
    await seedLedger(ctx, db, sku, rows, segments);
    const seedSeconds = (performance.now() - started) / 1000;
    if ((await api.sku(sku)).sold !== rows) throw new Error(`seeding ${sku}: the SKU view disagrees with ${rows} sold`);
    const label = `ledger of ${rows.toLocaleString('en-US')} rows`;
    const { growthConnections: connections, growthRequests: amount } = ctx.settings;
    await ctx.waitForQuiet(service);
    const path = `/skus/${encodeURIComponent(sku)}`;
    const read = { title: `${label} · GET /skus/:sku`, method: 'GET' as const, path, connections, amount };
    const skuRead = await ctx.round(service, read, 200);
    const body = { sku, quantity: 1 };
    const orders = await ctx.round(service, { title: `${label} · POST /orders`, body, connections, amount });
    await ctx.settle(service);
    const after = await api.sku(sku);
    const booksOk =
      after.sold === rows + (orders.statusCounts[201] ?? 0) && after.available + after.sold === after.stock;
    cases.push({ id: `growth-${rows}`, label, ledgerRows: rows, seedSeconds, skuRead, orders, booksOk });
  }
  return cases;
}

/**
 * `rows` one-unit sales, spread over the SKU's segments, with their orders, ledger rows and totals; in chunks that
 * finish well within the query timeout.
 */
async function seedLedger(ctx: RunContext, db: Db, sku: string, rows: number, segments: number): Promise<void> {
  const { id } = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
  const chunkRows = 100_000;
  const of = (n: number) => n.toLocaleString('en-US');
  for (let done = 0; done < rows; done += chunkRows) {
    const chunk = Math.min(chunkRows, rows - done);
    ctx.progress.note(`seeding ${sku}: ${of(done + chunk)} of ${of(rows)} ledger rows…`);
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

/**
 * Whether events stay bounded: hot-SKU orders at full speed for `retentionMinutes` on a service keeping events for
 * `retentionSeconds`, the feed's and the outbox's rows counted every `retentionSampleSeconds`. Once the retention has
 * passed, the feed should hold about one retention's worth of events and stay there.
 */
export async function runEventRetention(ctx: RunContext, db: Db, service: ServiceTarget, segments: number) {
  const { retentionMinutes, retentionSeconds, retentionSampleSeconds } = ctx.settings;
  const sku = await ctx.createSku(service, `retention-${segments}`, WARMUP_STOCK, segments);
  const counts = sql<{ events: number; outbox: number }>`
    select (select count(*) from events)::int as events, (select count(*) from event_outbox)::int as outbox`;
  const samples: { atSeconds: number; ordersPerSecond: number; events: number; outbox: number }[] = [];
  const started = performance.now();
  while (performance.now() - started < retentionMinutes * 60_000) {
    const title = `events kept ${retentionSeconds} s · minute ${((performance.now() - started) / 60_000).toFixed(1)}`;
    const body = { sku, quantity: 1 };
    const round = await ctx.round(service, { title, body, durationSeconds: retentionSampleSeconds });
    samples.push({
      atSeconds: Math.round((performance.now() - started) / 1000),
      ordersPerSecond: round.ratePerSecond[201] ?? 0,
      ...(await counts.execute(db)).rows[0]!,
    });
  }
  return { id: `event-retention-${segments}`, retentionSeconds, minutes: retentionMinutes, samples };
}
