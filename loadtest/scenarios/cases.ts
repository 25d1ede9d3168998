/** The cases that are not one warm-up and one measured round of orders with books (sales.ts). */
import { setMaxListeners } from 'node:events';
import { sql } from 'kysely';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RunContext } from './context.js';
import { auditStocks } from '../../test/support/invariants.js';
import { checkBooks, WARMUP_STOCK } from './sales.js';

type Echo = { id: string; label: string; service: ServiceTarget; path?: string; status?: number; round?: number };
/** The HTTP ceiling: POST /bench/echo through the service's stack (200), or another echo at `path` (`status`). */
export async function measureCeiling(ctx: RunContext, spec: Echo & { instances?: number }) {
  const { id, label, service, instances = 1, path, status = 200, round } = spec;
  const [echo] = await ctx.measureInTurns([{ service, spec: echoRequest(label, ctx.settings.quantity, path), status }]);
  return { id, instances, round, ...echo! };
}

/** An order's body sent to an echo: the product's own POST /bench/echo unless `path` names another. */
const echoRequest = (title: string, quantity: number, path = '/bench/echo') => {
  return { title, path, body: { sku: 'ceiling', quantity } };
};

const guarded = (id: string, label: string, guard = id, path = `/bench/oversell/${id}`) => ({ id, label, guard, path });
type Guard = (typeof guards)['none'];
/** Guards of the oversell demonstration: its unguarded benchmark routes, and the product's own POST /orders. */
export const guards = {
  none: guarded('none', 'no lock'),
  localMutex: guarded('local-mutex', 'process-local mutex'),
  redisLock: guarded('redis-lock', 'Redis segment lock'),
  product: guarded('product', 'the product, POST /orders', 'redis-lock', '/orders'),
};

/** Reference article 000: three one-unit orders per unit of stock at once; unshared locks let the ledger oversell. */
export async function runOversell(ctx: RunContext, service: ServiceTarget, instances: number, guard: Guard) {
  const stock = ctx.settings.oversellStock;
  const requests = stock * 3;
  const id = `oversell-${guard.id}-${instances}`;
  const sku = await ctx.createSku(service, id, stock, 1);
  const label = `oversell · ${guard.label} · ${instances} instance${instances > 1 ? 's' : ''}`;
  const round = { title: label, path: guard.path, body: { sku, quantity: 1 }, amount: requests };
  const measured = await ctx.round(service, { ...round, connections: Math.min(ctx.settings.connections, requests) });
  const audits = await auditStocks(ctx.backing.db, [sku]);
  const books = await checkBooks(ctx.api(service), audits, { sku, answeredUnits: measured.statusCounts[201] ?? 0 });
  return { id, label, guard: guard.guard, instances, stock, requests, measured, books };
}

export const refusalKinds = ['sold-out', 'not-on-sale'] as const; // Why a refusal case's orders are refused.
type Refusal = (typeof refusalKinds)[number];
/** Orders refused with 409 (sold out, or not yet on sale), in turns with the echo; reopened, the next must sell. */
export async function runRefusals(ctx: RunContext, service: ServiceTarget, segments: number, why: Refusal, of: string) {
  const api = ctx.api(service);
  const soldOut = why === 'sold-out';
  const window = soldOut ? {} : { saleStartsAt: new Date(Date.now() + 86_400_000).toISOString() };
  const sku = await ctx.createSku(service, `${why}-${segments}`, segments * 50, segments, window);
  for (let i = 0; soldOut && i < segments; i++) {
    const status = await api.order(sku, 50);
    if (status !== 201) throw new Error(`selling out ${sku}: order ${i} answered ${status}`);
  }
  const label = `${soldOut ? 'sold out' : 'not on sale yet'} · ${segments} segments${of}`;
  const attempts = async () => (await ctx.scrape(service)).sum('stock_lock_attempts_total');
  const attemptsBefore = await attempts();
  const [result, beside] = await ctx.measureInTurns([
    { service, spec: { title: label, body: { sku, quantity: 1 } }, status: 409 },
    { service, spec: echoRequest(`HTTP ceiling beside ${label}`, ctx.settings.quantity), status: 200 },
  ]);
  // The warm-up's attempts count too: there should be none at all.
  const attempted = (await attempts()) - attemptsBefore;
  const requests = result!.measured.responses + result!.warmup.responses;
  const lockAttemptsPerRequest = result!.measured.responses > 0 ? attempted / requests : null;
  const how = soldOut ? 'restock +100' : 'window opened';
  await (soldOut ? api.restock(sku, 100) : api.updateSku(sku, { saleStartsAt: null }));
  const started = performance.now();
  const firstOrderStatus = await api.order(sku, 1);
  const reopen = { how, firstOrderStatus, firstOrderMs: performance.now() - started };
  const echoBeside = { perSecond: beside!.perSecond, cpu: beside!.cpu };
  return { id: `${why}-${segments}`, why, segments, ...result!, lockAttemptsPerRequest, reopen, echoBeside };
}

/** Orders placed at once against reservations each confirmed by the connection's next request; both rates confirmed. */
export async function runLifecycle(ctx: RunContext, service: ServiceTarget, segments: number) {
  const measure = async (kind: string, title: string, confirmEach: boolean, status: number) => {
    const sku = await ctx.createSku(service, `lifecycle-${kind}-${segments}`, WARMUP_STOCK, segments);
    const body = { sku, quantity: 1, ...(confirmEach && { holdSeconds: 600 }) };
    const spec = { confirmEach, body, title: `${title} · ${segments} segments` };
    return (await ctx.measureInTurns([{ service, spec, status }]))[0]!;
  };
  const direct = await measure('direct', 'place directly', false, 201);
  const reserveThenConfirm = await measure('reserve', 'reserve then confirm', true, 200);
  return { id: `lifecycle-${segments}`, direct, reserveThenConfirm };
}

/** The same round of orders without, with `watchers` dashboards' event streams open on its SKU, and without again. */
export async function runDashboardCost(ctx: RunContext, service: ServiceTarget, segments: number, watchers: number) {
  const sku = await ctx.createSku(service, 'dashboard', WARMUP_STOCK, segments);
  const body = { sku, quantity: ctx.settings.quantity };
  const [first] = await ctx.measureInTurns([{ service, spec: { title: 'dashboard cost · no dashboard', body } }]);
  const round = async (label: string) => {
    await ctx.settle(service);
    const title = `dashboard cost · ${label}`;
    return { label, measured: await ctx.round(service, { title, body, amount: first!.measured.responses }) };
  };
  const events = Array.from({ length: watchers }, () => 0);
  const headers = ctx.api(service).adminHeaders;
  const streams = new AbortController();
  setMaxListeners(watchers, streams.signal); // Every open stream listens to it.
  const open = async (_: number, i: number) => {
    const response = await fetch(`${service.url}/dashboard/events?sku=${sku}`, { headers, signal: streams.signal });
    // Read until the streams are aborted at the end of the round.
    response.body!.pipeTo(new WritableStream({ write: () => void events[i]!++ })).catch(() => {});
  };
  await Promise.all(events.map(open));
  const watched = await round(`${watchers} dashboards watching`);
  streams.abort();
  const rounds = [{ label: 'no dashboard', measured: first!.measured }, watched, await round('no dashboard again')];
  return { watchers, rounds, minEventsPerWatcher: Math.min(...events) };
}

/** The SKU view and orders on an empty ledger and on ledgers seeded in bulk with consistent running totals. */
export async function runGrowth(ctx: RunContext, service: ServiceTarget, segments: number) {
  const api = ctx.api(service);
  const round = { connections: ctx.settings.growthConnections, amount: ctx.settings.growthRequests };
  const cases = [];
  for (const rows of ctx.settings.growthLedgerRows) {
    const sku = await ctx.createSku(service, `growth-${rows}`, rows + 100_000 * segments, segments);
    const seedSeconds = await seedLedger(ctx, sku, rows, segments);
    if ((await api.sku(sku)).sold !== rows) throw new Error(`seeding ${sku}: the SKU view disagrees with ${rows} sold`);
    const label = `ledger of ${rows.toLocaleString('en-US')} rows`;
    const view = { title: `${label} · GET /skus/:sku`, path: `/skus/${encodeURIComponent(sku)}` };
    const skuRead = await ctx.round(service, { ...round, ...view, method: 'GET' }, 200);
    const orders = await ctx.round(service, { ...round, title: `${label} · POST /orders`, body: { sku, quantity: 1 } });
    await ctx.settle(service);
    const question = { sku, answeredUnits: orders.statusCounts[201] ?? 0, soldBefore: rows };
    const { ok: booksOk } = await checkBooks(api, null, question);
    cases.push({ id: `growth-${rows}`, label, ledgerRows: rows, seedSeconds, skuRead, orders, booksOk });
  }
  return cases;
}

/** `rows` one-unit sales with their orders, ledger rows and totals; answers the seconds it took. */
async function seedLedger(ctx: RunContext, sku: string, rows: number, segments: number): Promise<number> {
  const started = performance.now();
  const { id } = await ctx.backing.db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
  const int = (n: number) => n.toLocaleString('en-US');
  // 20,000 rows a statement: within the 10 s query timeout even on a machine busy with other work.
  for (let done = 0; done < rows; done += 20_000) {
    const chunk = Math.min(20_000, rows - done);
    if (done % 500_000 === 0) ctx.progress.note(`seeding ${sku}: ${int(done)} of ${int(rows)} ledger rows…`);
    await sql`
      with placed as (
        insert into orders (id, sku_id, quantity, created_at)
        select gen_random_uuid(), ${id}, 1, now() from generate_series(1, ${chunk}) returning id
      ), ledger as (
        insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
        select id, ${id}, (row_number() over ()) % ${segments}, 1, 1, 0 from placed returning segment
      )
      update stock_segments s
         set available = s.available - c.sold, sold = s.sold + c.sold
        from (select segment, count(*) as sold from ledger group by segment) c
       where s.sku_id = ${id} and s.layout_version = 1 and s.segment = c.segment`.execute(ctx.backing.db);
  }
  await sql`analyze orders, stock_deductions`.execute(ctx.backing.db);
  return (performance.now() - started) / 1000;
}

/** Whether the feed and the outbox stay bounded under long full-speed orders with a short retention. */
export async function runEventRetention(ctx: RunContext, service: ServiceTarget, segments: number) {
  const { retentionMinutes, retentionSeconds, retentionSampleSeconds } = ctx.settings;
  const sku = await ctx.createSku(service, `retention-${segments}`, WARMUP_STOCK, segments);
  const counts = sql<{ events: number; outbox: number }>`
    select (select count(*) from events)::int as events, (select count(*) from event_outbox)::int as outbox`;
  const body = { sku, quantity: 1 };
  const samples = [];
  const started = performance.now();
  const minutes = () => (performance.now() - started) / 60_000;
  while (minutes() < retentionMinutes) {
    const title = `events kept ${retentionSeconds} s · minute ${minutes().toFixed(1)}`;
    const round = await ctx.round(service, { title, body, durationSeconds: retentionSampleSeconds });
    const atSeconds = Math.round(minutes() * 60);
    const { rows } = await counts.execute(ctx.backing.db);
    samples.push({ atSeconds, ordersPerSecond: round.ratePerSecond[201] ?? 0, ...rows[0]! });
  }
  return { id: `event-retention-${segments}`, retentionSeconds, minutes: retentionMinutes, samples };
}
