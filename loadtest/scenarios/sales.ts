/** The common shape of a throughput case (`measureSales`), and the books every case of orders is checked with. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import pMap from 'p-map';
import { EVENT_TYPES } from '../../src/events/event-types.js';
import { auditStocks, booksViolations, type StockAudit } from '../../test/support/invariants.js';
import { histogramDelta, type MetricsSnapshot } from '../../test/support/scrape-metric.js';
import type { StockApi } from '../client/stock-api.js';
import type { ServerStats } from '../infra/server-stats.js';
import { peakMemory } from '../infra/process-usage.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RoundResult } from '../runner/round.js';
import type { RunContext } from './context.js';

/** Stock of a warm-up SKU: far beyond what a few seconds can sell. */
export const WARMUP_STOCK = 1_000_000_000;
/** A measured SKU holds this many times the units its round can sell at most, so it never runs out. */
const STOCK_HEADROOM = 4;
/** Requests to the service at a time when creating or checking many SKUs: enough to be quick, few enough not to flood it. */
export const SIXTEEN_AT_A_TIME = { concurrency: 16 };

export type Profile = 'real' | 'business-step';
export type SalesCase = Awaited<ReturnType<typeof measureSales>> & { delivered?: number; outboxAfter?: number };

export interface SalesSpec {
  id: string;
  label: string;
  service: ServiceTarget;
  path?: string;
  profile?: Profile;
  /** Whether the service combines queued orders (COMBINE_MAX_BATCH > 1); defaults to the product's own flow. */
  combining?: boolean;
  instances?: number;
  segments: number;
  connections?: number;
  /** The orders' credentials, made before the round (default: the service's admin token, when it has one). */
  headers?: () => Promise<Record<string, string>>;
  stockIn?: 'segments' | 'redis-counter';
  /** The alternative keeps its own tables and has no lock metrics: its books are checked through its API only. */
  alternative?: boolean;
  serverStats?: ServerStats;
  /** Spread traffic: a random one of `skus` SKUs per request, `hotShare` of them to one hot SKU instead. */
  traffic?: { skus: number; hotShare: number };
  tags?: { redis?: string; lockBackend?: string; holdMs?: number; auth?: string; events?: string; round?: number } & {
    /** The fleet: Redis's and Postgres's one-way delay from the service, ms. */
    delayMs?: number;
  };
}

/** A timed warm-up on fresh SKUs, then a measured round sized by its rate on a fresh SKU, with the books after each. */
export async function measureSales(ctx: RunContext, spec: SalesSpec) {
  const [result] = await compareSales(ctx, [spec]);
  return result!;
}

// Cases compared: each warmed up on fresh SKUs, then all measured in turns on SKUs sized by its warm-up rate, books
// checked after both. Server costs (`serverStats`) count all the servers did meanwhile: a case measured alone.
export async function compareSales(ctx: RunContext, specs: SalesSpec[]) {
  const { quantity } = ctx.settings;
  const cases = [];
  for (const spec of specs) {
    const { service, path = '/orders', id, label, segments, profile = 'real', instances = 1 } = spec;
    const connections = spec.connections ?? ctx.settings.connections;
    const headers = (await spec.headers?.()) ?? ctx.api(service).adminHeaders;
    const round = (set: SkuSet) => {
      return { title: label, path, headers, connections, body: { sku: set.skus[0], quantity }, pickSku: set.pick };
    };
    const warm = await createSkus(ctx, spec, `${id}-warm`, WARMUP_STOCK);
    const warmup = await ctx.warmUp(service, round(warm));
    // The warm-up was cut off by time: up to one order per connection may have sold without an answer.
    const warmupBooks = await booksOf(ctx, spec, warm, warmup, connections * quantity);
    const stock = Math.max(10_000, ctx.measuredAmount(warmup, connections) * quantity * STOCK_HEADROOM);
    const set = spec.traffic ? warm : await createSkus(ctx, spec, id, stock);
    const lockMetrics = path === '/orders' && !spec.alternative;
    const shown = { id, label, profile, combining: spec.combining ?? lockMetrics, instances, segments, connections };
    // Cases on one service take turns with each other: each counts the lock figures of its own turns only.
    const shared = specs.some((other) => other !== spec && other.service === service);
    const turns: { seconds: number; lock: LockStats }[] = [];
    const meter = async () => {
      const before = await ctx.scrape(service);
      return async (turn: RoundResult) => {
        const lock = lockStats(before, await ctx.scrape(service), turn.durationSeconds, segments);
        turns.push({ seconds: turn.durationSeconds, lock });
      };
    };
    const side = { service, spec: round(set), warmup, ...(lockMetrics && shared && { meter }) };
    cases.push({ spec, shown, lockMetrics: lockMetrics && !shared, turns, warmupBooks, set, side });
  }
  // Started once every side has warmed up, so that they count the measured turns only.
  const meters = [];
  for (const { spec, lockMetrics } of cases) {
    const before = lockMetrics ? await ctx.scrape(spec.service) : null;
    meters.push({ before, endServerStats: await spec.serverStats?.start() });
  }
  const rounds = await ctx.measureInTurns(cases.map((c) => c.side));
  const results = [];
  for (const [i, { spec, shown, warmupBooks, set, turns }] of cases.entries()) {
    const { before, endServerStats } = meters[i]!;
    const { measured, perSecond, cpu } = rounds[i]!;
    const serverCost = await endServerStats?.(measured.statusCounts[201] ?? 0);
    const lock = before
      ? lockStats(before, await ctx.scrape(spec.service), measured.durationSeconds, spec.segments)
      : turns.length
        ? overTurns(turns)
        : null;
    results.push({
      ...shown,
      measured,
      perSecond,
      lock,
      books: await booksOf(ctx, spec, set, measured),
      warmupBooks,
      memory: peakMemory(spec.service.pids),
      cpu,
      ...(serverCost && { serverCost }),
      ...spec.tags,
      ...(spec.traffic && { traffic: spec.traffic.hotShare > 0 ? ('mixed' as const) : ('spread' as const) }),
    });
  }
  return results;
}

/** A round's SKUs, how each request picks one (undefined: the first), their sales when last checked (counted from). */
type SkuSet = { skus: string[]; pick?: () => string; sold?: Record<string, number> };

/** One SKU, or (spread traffic) `traffic.skus` of them plus, for mixed traffic, one hot SKU first. */
async function createSkus(ctx: RunContext, spec: SalesSpec, tag: string, stock: number): Promise<SkuSet> {
  const create = (name: string) => ctx.createSku(spec.service, name, stock, spec.segments);
  if (!spec.traffic) return { skus: [await create(tag)] };
  const { skus: count, hotShare } = spec.traffic;
  const hot = hotShare > 0 ? await create(`${tag}-hot`) : undefined;
  ctx.progress.note(`${spec.label}: creating ${count + (hot ? 1 : 0)} SKUs…`);
  const spread = await pMap(Array(count).keys(), (i) => create(`${tag}-${i}`), SIXTEEN_AT_A_TIME);
  const pick = () => (hot && Math.random() < hotShare ? hot : spread[Math.floor(Math.random() * spread.length)]!);
  return { skus: hot ? [hot, ...spread] : spread, pick };
}

/** A round's SKUs' books as one (`slack`: units that may have sold unanswered); the set keeps each SKU's sales. */
async function booksOf(ctx: RunContext, spec: SalesSpec, set: SkuSet, round: RoundResult, slack = 0): Promise<Books> {
  if (set.skus.length > 1) ctx.progress.note(`${spec.label}: checking the books of ${set.skus.length} SKUs…`);
  const audits = spec.alternative ? null : await auditStocks(ctx.backing.db, set.skus);
  const check = (sku: string) => {
    // A spread round counts the units answered per SKU; a one-SKU round's 201s are all that SKU's.
    const answeredUnits = round.answeredBySku
      ? (round.answeredBySku[sku] ?? 0)
      : (round.statusCounts[201] ?? 0) * ctx.settings.quantity;
    const question = { sku, answeredUnits, slack, soldBefore: set.sold?.[sku], stockIn: spec.stockIn };
    return checkBooks(ctx.api(spec.service), audits, question);
  };
  const all = await pMap(set.skus, check, SIXTEEN_AT_A_TIME);
  set.sold = Object.fromEntries(set.skus.map((sku, i) => [sku, all[i]!.sold]));
  if (all.length === 1) return all[0]!;
  const sum = (figure: 'available' | 'sold' | 'oversold') => all.reduce((total, books) => total + books[figure], 0);
  const failed = all.flatMap((books, i) =>
    books.checks.filter((c) => !c.ok).map((c) => ({ ...c, name: `${set.skus[i]}: ${c.name}` })),
  );
  const summary = { name: `books of ${all.length} SKUs`, ok: failed.length === 0, detail: `${failed.length} failed` };
  const totals = { available: sum('available'), sold: sum('sold'), oversold: sum('oversold') };
  return { ok: failed.length === 0, checks: [summary, ...failed], ...totals };
}

type LockStats = ReturnType<typeof lockStats>;

/** A case's lock figures over its turns: rates and means weighted by each turn's length, a p99 the worst turn's. */
function overTurns(turns: { seconds: number; lock: LockStats }[]): LockStats {
  const seconds = turns.reduce((sum, turn) => sum + turn.seconds, 0);
  const names = Object.keys(turns[0]!.lock) as (keyof LockStats)[];
  const figure = (name: keyof LockStats) => {
    const values = turns.map((turn) => turn.lock[name]);
    if (name === 'fencedOut') return values.reduce((sum, value) => sum + value, 0);
    if (name.endsWith('P99') || name.endsWith('P99Ms')) return Math.max(...values);
    return turns.reduce((sum, turn) => sum + turn.lock[name] * turn.seconds, 0) / seconds;
  };
  return Object.fromEntries(names.map((name) => [name, figure(name)])) as LockStats;
}

function lockStats(before: MetricsSnapshot, after: MetricsSnapshot, seconds: number, segments: number) {
  const delta = (name: string) => after.sum(name) - before.sum(name);
  const answered = delta('stock_orders_total');
  const perOrder = (name: string) => (answered > 0 ? delta(name) / answered : 0);
  const wait = histogramDelta(before, after, 'stock_lock_wait_seconds');
  const hold = histogramDelta(before, after, 'stock_lock_hold_seconds');
  return {
    lockAttemptsPerOrder: perOrder('stock_lock_attempts_total'),
    busyPerOrder: perOrder('stock_lock_busy_total'),
    waitsPerOrder: perOrder('stock_lock_waits_total'),
    segmentVisitsP99: histogramDelta(before, after, 'stock_order_segment_visits').quantileUpperBound(0.99),
    lockWaitP99Ms: wait.quantileUpperBound(0.99) * 1000,
    meanHoldMs: hold.mean * 1000,
    acquisitionsPerSecond: delta('stock_lock_acquisitions_total') / seconds,
    lockUtilisation: hold.sum / (seconds * segments),
    fencedOut: delta('stock_fenced_out_total'),
    // What spreads an order's Postgres and Redis round trips over others: the orders one batch wrote together, and the
    // segment states it had to read under the lock rather than recall.
    ordersPerBatch: histogramDelta(before, after, 'stock_batch_orders').mean,
    segmentReadsPerOrder: perOrder('stock_segment_reads_total'),
  };
}

/** `measureSales` with a webhook receiving every event; then its deliveries and the outbox rows not yet moved. */
export async function measureWithWebhook(ctx: RunContext, spec: SalesSpec): Promise<SalesCase> {
  let delivered = 0;
  const receiver = createServer((req, res) => {
    delivered++;
    req.resume().on('end', () => res.writeHead(204).end());
  });
  await once(receiver.listen(0, '127.0.0.1'), 'listening');
  const api = ctx.api(spec.service);
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const { id } = await api.call<{ id: string }>(201, 'POST', '/webhooks', { url, types: EVENT_TYPES });
  try {
    const result = await measureSales(ctx, spec);
    const outbox = await sql<{ n: number }>`select count(*)::int as n from event_outbox`.execute(ctx.backing.db);
    return { ...result, delivered, outboxAfter: outbox.rows[0]?.n };
  } finally {
    await api.call(204, 'DELETE', `/webhooks/${id}`).catch(() => {});
    receiver.close();
  }
}

export type Books = Awaited<ReturnType<typeof checkBooks>>;

type Question = { sku: string; answeredUnits: number; slack?: number; soldBefore?: number; stockIn?: string };
/** A SKU's books through the API and, when given its audit from Postgres, with the tests' books checker. */
export async function checkBooks(api: StockApi, audits: Map<string, StockAudit> | null, question: Question) {
  const { sku, answeredUnits, slack = 0, soldBefore: before = 0 } = question;
  const checks: { name: string; ok: boolean; detail: string }[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const { sold, stock, segmentStock, ...view } = await api.sku(sku);
  const counter = question.stockIn === 'redis-counter';
  const available = counter ? ((await api.redisCounter(sku)) ?? view.available) : view.available;
  if (!counter) {
    const negative = segmentStock.filter((s) => s.available < 0).length;
    check('no segment below 0 (API)', negative === 0, `${negative} negative of ${segmentStock.length}`);
  }
  const soldName = `units sold ${slack ? '≥ Σ 201 quantities, by at most the unanswered requests' : '= Σ 201 quantities'}`;
  const soldDetail = `sold ${sold}${before ? ` (${before} before the round)` : ''}, answered ${answeredUnits}`;
  const inRound = sold - before - answeredUnits;
  check(`${soldName} (API)`, inRound >= 0 && inRound <= slack, soldDetail + (slack ? `, unanswered ≤ ${slack}` : ''));
  check('available + sold = stock (API)', available + sold === stock, `${available} + ${sold} vs ${stock}`);
  if (audits) {
    const audit = audits.get(sku);
    if (!audit) throw new Error(`SKU ${sku} is not in Postgres`);
    check('Σ ledger = units sold (Postgres)', audit.sold === sold, `ledger ${audit.sold}, API ${sold}`);
    // The Redis counter baseline keeps its stock in Redis: its segments never go down, so only its ledger is checked.
    const wrong = counter ? undefined : booksViolations(audit);
    if (wrong) check('books exact (Postgres, the tests’ books checker)', !wrong.length, wrong.join('; ') || 'exact');
  }
  return { ok: checks.every((c) => c.ok), checks, available, sold, oversold: Math.max(0, sold + available - stock) };
}
