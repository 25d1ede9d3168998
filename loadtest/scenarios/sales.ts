import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { EVENT_TYPES } from '../../src/events/event-types.js';
import { auditStock, booksViolations } from '../../test/support/invariants.js';
import { waitFor } from '../../test/support/wait-for.js';
import { histogramDelta, MetricsSnapshot } from '../client/prometheus.js';
import type { StockApi } from '../client/stock-api.js';
import type { ServerStats } from '../infra/server-stats.js';
import { readMemory, type ServiceTarget } from '../infra/service-process.js';
import { type RoundResult, type RoundSpec, runRound } from '../runner/round.js';
import type { RunContext } from './context.js';

/** Stock of a warm-up SKU: far beyond what a few seconds can sell. */
export const WARMUP_STOCK = 1_000_000_000;
/** A measured SKU holds this many times the units its round can sell at most, so it never runs out. */
const STOCK_HEADROOM = 4;
/** Spread SKUs are created this many at a time. */
const SKU_CREATION_BATCH = 16;

export type Profile = 'real' | 'business-step';
export type SalesCase = Awaited<ReturnType<typeof measureSales>>;
export type CeilingCase = Awaited<ReturnType<typeof measureCeiling>>;

export interface SalesSpec {
  id: string;
  label: string;
  service: ServiceTarget;
  /** What sells: the product's POST /orders (default), or a benchmark route. */
  path?: string;
  profile?: Profile;
  /** Whether the service combines queued orders (COMBINE_MAX_BATCH > 1); defaults to the product's own flow. */
  combining?: boolean;
  instances?: number;
  segments: number;
  connections?: number;
  /** The orders' credentials (default: the service's admin token, when it has one). */
  headers?: Record<string, string>;
  stockIn?: 'segments' | 'redis-counter';
  /** Audit the books in Postgres too (default); the alternative keeps its own tables, checked through its API. */
  auditInPostgres?: boolean;
  /** Whether this path goes through the product's order flow (default), and so feeds its lock metrics. */
  lockMetrics?: boolean;
  /** Read the servers' own counters around the measured round (Redis commands and CPU, Postgres statements). */
  serverStats?: ServerStats;
  /** Spread traffic: a random one of `skus` SKUs per request, `hotShare` of them to one hot SKU instead. */
  traffic?: { skus: number; hotShare: number };
  /** Told apart in the report: which Redis, lock backend or credential the case used. */
  tags?: { redis?: string; lockBackend?: string; holdMs?: number; auth?: string; events?: string };
}

/**
 * The common shape of a throughput case: a fresh warm-up SKU (or, for spread traffic, SKUs) and a timed warm-up
 * round, then a fresh SKU sized from the warm-up's rate (spread traffic: the same SKUs; a SKU's first order costs
 * more than the rest) and a measured round of a fixed number of requests, bracketed by metric scrapes; the books
 * after each round.
 */
export async function measureSales(ctx: RunContext, spec: SalesSpec) {
  const { settings } = ctx;
  const { service, path = '/orders', lockMetrics = path === '/orders' } = spec;
  const api = ctx.api(service);
  const connections = spec.connections ?? settings.connections;
  const quantity = settings.quantity;
  const headers = spec.headers ?? api.adminHeaders;
  const round = (set: SkuSet, title: string, extra: Partial<RoundSpec>) =>
    orderRound(ctx, service, {
      title,
      path,
      body: { sku: set.skus[0], quantity },
      pickSku: set.pick,
      headers,
      connections,
      ...extra,
    });

  const warm = await createSkus(ctx, spec, `${spec.id}-warm`, WARMUP_STOCK);
  await ctx.waitForQuiet(service);
  const warmup = await round(warm, `${spec.label} · warm-up`, { durationSeconds: settings.warmupSeconds });
  await settle(service, settings.timeoutSeconds);
  const amount = measuredAmount(ctx, warmup, connections);
  // The warm-up was cut off by time: up to one order per connection may have sold without an answer.
  const cutOff = { exact: false, unansweredAtMost: connections * quantity };
  const { soldBySku: warmSold, ...warmupBooks } = await checkSetBooks(ctx, spec, warm, warmup, cutOff);
  const measuredSet = spec.traffic
    ? warm
    : await createSkus(ctx, spec, spec.id, Math.max(10_000, amount * quantity * STOCK_HEADROOM));
  const memory = memorySampler(service.pids());
  const scrape = () => MetricsSnapshot.scrape(service.metricsUrl, service.adminToken);
  const before = lockMetrics ? await scrape() : null;
  const endServerStats = await spec.serverStats?.start();
  const cpu = ctx.meterCpu(service);
  const measured = await round(measuredSet, spec.label, { amount });
  const cpuUsage = cpu();
  const serverCost = await endServerStats?.(measured.statusCounts[201] ?? 0);
  const after = before ? await scrape() : null;
  const { soldBySku: _, ...books } = await checkSetBooks(ctx, spec, measuredSet, measured, {
    exact: true,
    soldBefore: warmSold,
  });
  return {
    id: spec.id,
    label: spec.label,
    path,
    profile: spec.profile ?? 'real',
    combining: spec.combining ?? lockMetrics,
    instances: spec.instances ?? 1,
    segments: spec.segments,
    connections,
    quantity,
    warmup,
    measured,
    ordersPerSecond: measured.ratePerSecond[201] ?? 0,
    lock: before && after ? lockStats(before, after, measured.durationSeconds, spec.segments) : null,
    books,
    warmupBooks,
    memory: memory(),
    cpu: cpuUsage,
    ...(serverCost && { serverCost }),
    ...spec.tags,
    ...(spec.traffic && {
      traffic: spec.traffic.hotShare > 0 ? ('mixed' as const) : ('spread' as const),
      skus: spec.traffic.skus,
    }),
  };
}

/** The SKUs of one round, and how each request picks one (undefined: every request goes to the first). */
interface SkuSet {
  skus: string[];
  pick?: () => string;
}

/** One SKU, or (spread traffic) `traffic.skus` of them plus, for mixed traffic, one hot SKU first. */
async function createSkus(ctx: RunContext, spec: SalesSpec, tag: string, stock: number): Promise<SkuSet> {
  const api = ctx.api(spec.service);
  const create = async (name: string) => (await api.createSku(name, stock, spec.segments)).sku;
  if (!spec.traffic) return { skus: [await create(ctx.skuName(tag))] };
  const { skus: count, hotShare } = spec.traffic;
  const hot = hotShare > 0 ? await create(ctx.skuName(`${tag}-hot`)) : undefined;
  const names = Array.from({ length: count }, (_, i) => ctx.skuName(`${tag}-${i}`));
  const spread: string[] = [];
  for (let i = 0; i < names.length; i += SKU_CREATION_BATCH) {
    spread.push(...(await Promise.all(names.slice(i, i + SKU_CREATION_BATCH).map(create))));
  }
  const pick = () => (hot && Math.random() < hotShare ? hot : spread[Math.floor(Math.random() * spread.length)]!);
  return { skus: hot ? [hot, ...spread] : spread, pick };
}

/** The books of every SKU of a round against the 201 answers it got; one Books for the round, and each SKU's sales. */
async function checkSetBooks(
  ctx: RunContext,
  spec: SalesSpec,
  set: SkuSet,
  round: RoundResult,
  question: Pick<BooksQuestion, 'exact' | 'unansweredAtMost'> & { soldBefore?: Record<string, number> },
): Promise<Books & { soldBySku: Record<string, number> }> {
  const { soldBefore, ...rest } = question;
  const all: Books[] = [];
  for (const sku of set.skus) {
    const answeredUnits =
      round.answeredBySku?.[sku] ?? (round.answeredBySku ? 0 : (round.statusCounts[201] ?? 0) * ctx.settings.quantity);
    const db = spec.auditInPostgres === false ? null : ctx.db;
    const asked = { sku, answeredUnits, soldBefore: soldBefore?.[sku], stockIn: spec.stockIn, ...rest };
    all.push(await checkBooks(ctx.api(spec.service), db, asked));
  }
  const soldBySku = Object.fromEntries(set.skus.map((sku, i) => [sku, all[i]!.sold]));
  if (all.length === 1) return { ...all[0]!, soldBySku };
  const sum = (pick: (b: Books) => number) => all.reduce((total, b) => total + pick(b), 0);
  const failed = all.flatMap((b, i) =>
    b.checks.filter((c) => !c.ok).map((c) => ({ ...c, name: `${set.skus[i]}: ${c.name}` })),
  );
  return {
    ok: failed.length === 0,
    checks: [
      { name: `books of ${all.length} SKUs`, ok: failed.length === 0, detail: `${failed.length} failed` },
      ...failed,
    ],
    stock: sum((b) => b.stock),
    available: sum((b) => b.available),
    sold: sum((b) => b.sold),
    answeredUnits: sum((b) => b.answeredUnits),
    oversold: sum((b) => b.oversold),
    soldBySku,
  };
}

type Titled = Partial<RoundSpec> & { title: string };

/** A round against a service: the run's connections, timeout and quantity, the service's token, POST /orders. */
export function orderRound(ctx: RunContext, service: ServiceTarget, spec: Titled, status = 201) {
  const { connections, timeoutSeconds, quantity } = ctx.settings;
  const headers = ctx.api(service).adminHeaders;
  const base = { baseUrl: service.url, path: '/orders', body: { quantity }, headers, connections, timeoutSeconds };
  return runRound({ ...base, ...spec }, status, ctx.progress);
}

/** A timed warm-up, then a measured round of as many requests as the warm-up's rate fills the measuring time with. */
export async function warmThenMeasure(ctx: RunContext, service: ServiceTarget, spec: Titled, status: number) {
  await ctx.waitForQuiet(service);
  const warm = { ...spec, title: `${spec.title} · warm-up`, durationSeconds: ctx.settings.warmupSeconds };
  const warmup = await orderRound(ctx, service, warm, status);
  await settle(service, ctx.settings.timeoutSeconds);
  const cpu = ctx.meterCpu(service);
  // A reservation round sends two requests per order: a reservation and its confirmation.
  const amount = measuredAmount(ctx, warmup, ctx.settings.connections, status) * (spec.confirmEach ? 2 : 1);
  const measured = await orderRound(ctx, service, { ...spec, amount }, status);
  return { warmup, measured, cpu: cpu() };
}

/**
 * A freshly started process runs its first seconds unoptimised (JIT) and with cold pools: orders through the whole
 * HTTP stack before any measurement, on a throwaway SKU, so the first case is not the one that pays.
 */
export async function primeService(ctx: RunContext, service: ServiceTarget): Promise<void> {
  const sku = ctx.skuName('prime');
  await ctx.api(service).createSku(sku, WARMUP_STOCK, 4);
  const body = { sku, quantity: ctx.settings.quantity };
  const durationSeconds = ctx.settings.warmupSeconds;
  await orderRound(ctx, service, { title: `priming ${service.label}`, body, durationSeconds });
  await settle(service, ctx.settings.timeoutSeconds);
}

/**
 * The HTTP ceiling: the same stack answering POST /bench/echo with the order's body (200); or, with `path` and
 * `status`, another echo (the bare express app's POST /orders, 201).
 */
export async function measureCeiling(ctx: RunContext, spec: CeilingSpec) {
  const { id, label, service, instances, path, status = 200 } = spec;
  const round = {
    title: label,
    path: path ?? '/bench/echo',
    body: { sku: 'ceiling', quantity: ctx.settings.quantity },
  };
  const { warmup, measured, cpu } = await warmThenMeasure(ctx, service, round, status);
  const perSecond = measured.ratePerSecond[status] ?? 0;
  return { id, label, instances, warmup, measured, perSecond, cpu, ...(path && { path }) };
}
type CeilingSpec = Pick<SalesSpec, 'id' | 'label' | 'service' | 'path'> & { instances: number; status?: number };

/**
 * Waits until the service has finished every order: a warm-up round stops on time, and orders it left in flight
 * (parked for a lock, up to the wait budget) must not run into the next round or its metrics. Requests to the
 * benchmark routes are not counted there; they finish within milliseconds, which the short pause covers.
 */
export async function settle(service: ServiceTarget, timeoutSeconds: number): Promise<void> {
  await sleep(100);
  const inProgress = async () =>
    (await MetricsSnapshot.scrape(service.metricsUrl, service.adminToken)).sum('stock_orders_in_progress');
  await waitFor(async () => (await inProgress()) === 0, timeoutSeconds * 1000);
}

/** Requests for the measured round: what the warm-up rate fills the measuring time with. */
export function measuredAmount(ctx: RunContext, warmup: RoundResult, connections: number, status = 201): number {
  const wanted = Math.round((warmup.ratePerSecond[status] ?? 0) * ctx.settings.measureSeconds);
  return Math.max(connections * 2, Math.min(wanted, ctx.settings.maxRequestsPerRound));
}

/** Lock figures for a measured round, from the service's metrics before and after it. */
function lockStats(before: MetricsSnapshot, after: MetricsSnapshot, seconds: number, segments: number) {
  const delta = (name: string) => after.sum(name) - before.sum(name);
  const outcomesBefore = before.byLabel('stock_orders_total', 'outcome');
  const outcomes = Object.fromEntries(
    Object.entries(after.byLabel('stock_orders_total', 'outcome'))
      .map(([outcome, n]) => [outcome, n - (outcomesBefore[outcome] ?? 0)] as const)
      .filter(([, n]) => n > 0),
  );
  const answered = Object.values(outcomes).reduce((a, b) => a + b, 0);
  const perOrder = (value: number) => (answered > 0 ? value / answered : 0);
  const wait = histogramDelta(before, after, 'stock_lock_wait_seconds');
  const hold = histogramDelta(before, after, 'stock_lock_hold_seconds');
  return {
    /** Orders answered during the measured round, by outcome (placed, out_of_stock, lock_busy, …). */
    outcomes,
    lockAttemptsPerOrder: perOrder(delta('stock_lock_attempts_total')),
    busyPerOrder: perOrder(delta('stock_lock_busy_total')),
    waitsPerOrder: perOrder(delta('stock_lock_waits_total')),
    segmentVisitsP99: histogramDelta(before, after, 'stock_order_segment_visits').quantileUpperBound(0.99),
    meanLockWaitMs: wait.mean * 1000,
    lockWaitP99Ms: wait.quantileUpperBound(0.99) * 1000,
    meanHoldMs: hold.mean * 1000,
    acquisitionsPerSecond: delta('stock_lock_acquisitions_total') / seconds,
    /** Share of the round's time the locks were held: Σ hold / (duration × segments). */
    lockUtilisation: hold.sum / (seconds * segments),
    fencedOut: delta('stock_fenced_out_total'),
    /** How late the service's timers and I/O callbacks ran over the round (the gauge restarts at every scrape). */
    eventLoopLagP99Ms: after.sum('nodejs_eventloop_lag_p99_seconds') * 1000,
  };
}

/** Samples the RSS of local service processes every 250 ms while a round runs; the returned function stops it. */
function memorySampler(pids: number[]) {
  let maxRssBytes = 0;
  const sample = () => readMemory(pids).map((s) => ((maxRssBytes = Math.max(maxRssBytes, s.rssBytes)), s.peakRssBytes));
  const timer = pids.length > 0 ? setInterval(sample, 250) : undefined;
  return () => {
    if (!timer) return null;
    clearInterval(timer);
    return { maxRssBytes, peakRssBytes: Math.max(0, ...sample()) };
  };
}

/**
 * `measureSales` with a webhook endpoint registered for every event type: a receiver in this process that answers
 * 204 to each delivery. Afterwards: how many deliveries it got, and the outbox rows the sequencer had not moved yet.
 */
export async function measureWithWebhook(ctx: RunContext, service: ServiceTarget, spec: Omit<SalesSpec, 'service'>) {
  let delivered = 0;
  const receiver = createServer((req, res) => {
    req.resume().on('end', () => {
      delivered++;
      res.writeHead(204).end();
    });
  });
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  const api = ctx.api(service);
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const hook = await fetch(`${service.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...api.adminHeaders },
    body: JSON.stringify({ url, types: EVENT_TYPES }),
  });
  if (hook.status !== 201) throw new Error(`registering a webhook answered ${hook.status}: ${await hook.text()}`);
  const { id } = (await hook.json()) as { id: string };
  try {
    const result = await measureSales(ctx, { ...spec, service });
    const outbox = ctx.db && (await sql<{ n: number }>`select count(*)::int as n from event_outbox`.execute(ctx.db));
    return { ...result, delivered, outboxAfter: outbox?.rows[0]?.n };
  } finally {
    await fetch(`${service.url}/webhooks/${id}`, { method: 'DELETE', headers: api.adminHeaders });
    receiver.close();
  }
}

export type Books = Awaited<ReturnType<typeof checkBooks>>;

export interface BooksQuestion {
  sku: string;
  /** Σ quantities of the 201 answers the load generator received. */
  answeredUnits: number;
  /**
   * Exact: every request was answered, so sold must equal answeredUnits. A warm-up round is cut off by time and
   * may leave up to `unansweredAtMost` units unanswered that the service still sold.
   */
  exact: boolean;
  unansweredAtMost?: number;
  /** Units the SKU had sold before the round (spread traffic measures on the SKUs its warm-up used). */
  soldBefore?: number;
  /** Where the stock lives: the SKU's segments (the product) or the Redis baseline's counter. */
  stockIn?: 'segments' | 'redis-counter';
}

/** Checks a SKU's books through the API and, when reachable, straight in Postgres with the tests' books checker. */
export async function checkBooks(api: StockApi, db: Db | null, question: BooksQuestion) {
  const checks: { name: string; ok: boolean; detail: string }[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const view = await api.sku(question.sku);
  const { sold, stock } = view;
  const counter = question.stockIn === 'redis-counter';
  const available = counter ? ((await api.redisCounter(question.sku)) ?? view.available) : view.available;
  if (!counter) {
    const negative = view.segmentStock.filter((s) => s.available < 0).length;
    check('no segment below 0 (API)', negative === 0, `${negative} negative of ${view.segmentStock.length}`);
  }
  const before = question.soldBefore ?? 0;
  const slack = question.exact ? 0 : (question.unansweredAtMost ?? 0);
  check(
    question.exact
      ? 'units sold = Σ 201 quantities (API)'
      : 'units sold ≥ Σ 201 quantities, by at most the unanswered requests (API)',
    sold - before >= question.answeredUnits && sold - before - question.answeredUnits <= slack,
    `sold ${sold}${before ? ` (${before} before the round)` : ''}, answered ${question.answeredUnits}${slack ? `, unanswered ≤ ${slack}` : ''}`,
  );
  check('available + sold = stock (API)', available + sold === stock, `${available} + ${sold} vs ${stock}`);
  if (db) {
    const audit = await auditStock(db, question.sku);
    if (!audit) throw new Error(`SKU ${question.sku} is not in Postgres`);
    check('Σ ledger = units sold (Postgres)', audit.sold === sold, `ledger ${audit.sold}, API ${sold}`);
    // The Redis counter baseline keeps its stock in Redis: its segments never go down, so only its ledger is checked.
    const wrong = counter ? undefined : booksViolations(audit);
    if (wrong)
      check('books exact (Postgres, the tests’ books checker)', wrong.length === 0, wrong.join('; ') || 'exact');
  }
  const answeredUnits = question.answeredUnits;
  return {
    ok: checks.every((c) => c.ok),
    checks,
    stock,
    available,
    sold,
    answeredUnits,
    oversold: Math.max(0, sold + available - stock),
  };
}
