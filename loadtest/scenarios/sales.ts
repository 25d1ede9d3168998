/** The common shape of a throughput case (`measureSales`), and the books every case of orders is checked with. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { EVENT_TYPES } from '../../src/events/event-types.js';
import { auditStock, booksViolations } from '../../test/support/invariants.js';
import { histogramDelta, type MetricsSnapshot } from '../client/prometheus.js';
import type { StockApi } from '../client/stock-api.js';
import type { ServerStats } from '../infra/server-stats.js';
import { sampleMemory } from '../infra/process-usage.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RoundResult } from '../runner/round.js';
import type { RunContext } from './context.js';

/** Stock of a warm-up SKU: far beyond what a few seconds can sell. */
export const WARMUP_STOCK = 1_000_000_000;
/** A measured SKU holds this many times the units its round can sell at most, so it never runs out. */
const STOCK_HEADROOM = 4;
/** Spread SKUs are created this many at a time. */
const SKU_CREATION_BATCH = 16;

export type Profile = 'real' | 'business-step';
export type SalesCase = Awaited<ReturnType<typeof measureSales>>;

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
 * A fresh warm-up SKU (or, for spread traffic, SKUs) and a timed warm-up round, then a fresh SKU sized from the
 * warm-up's rate (spread traffic: the same SKUs; a SKU's first order costs more than the rest) and a measured round of
 * a fixed number of requests, bracketed by metric scrapes; the books after each round.
 */
export async function measureSales(ctx: RunContext, spec: SalesSpec) {
  const { service, path = '/orders', lockMetrics = path === '/orders' } = spec;
  const { quantity } = ctx.settings;
  const connections = spec.connections ?? ctx.settings.connections;
  const round = (set: SkuSet) => ({
    title: spec.label,
    path,
    body: { sku: set.skus[0], quantity },
    pickSku: set.pick,
    headers: spec.headers ?? ctx.api(service).adminHeaders,
    connections,
  });

  const warm = await createSkus(ctx, spec, `${spec.id}-warm`, WARMUP_STOCK);
  const warmup = await ctx.warmUp(service, round(warm));
  const amount = ctx.measuredAmount(warmup, connections);
  // The warm-up was cut off by time: up to one order per connection may have sold without an answer.
  const { soldBySku, ...warmupBooks } = await checkSetBooks(ctx, spec, warm, warmup, connections * quantity);
  const measuredSet = spec.traffic
    ? warm
    : await createSkus(ctx, spec, spec.id, Math.max(10_000, amount * quantity * STOCK_HEADROOM));
  const memory = sampleMemory(service.pids);
  const before = lockMetrics ? await ctx.scrape(service) : null;
  const endServerStats = await spec.serverStats?.start();
  const cpu = ctx.meterCpu(service);
  const measured = await ctx.round(service, { ...round(measuredSet), amount });
  const cpuUsage = cpu();
  const serverCost = await endServerStats?.(measured.statusCounts[201] ?? 0);
  const after = before ? await ctx.scrape(service) : null;
  const { soldBySku: _, ...books } = await checkSetBooks(ctx, spec, measuredSet, measured, 0, soldBySku);
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
  const create = (name: string) => ctx.createSku(spec.service, name, stock, spec.segments);
  if (!spec.traffic) return { skus: [await create(tag)] };
  const { skus: count, hotShare } = spec.traffic;
  const hot = hotShare > 0 ? await create(`${tag}-hot`) : undefined;
  const spread: string[] = [];
  for (let i = 0; i < count; i += SKU_CREATION_BATCH) {
    const batch = Array.from({ length: Math.min(SKU_CREATION_BATCH, count - i) }, (_, j) => create(`${tag}-${i + j}`));
    spread.push(...(await Promise.all(batch)));
  }
  const pick = () => (hot && Math.random() < hotShare ? hot : spread[Math.floor(Math.random() * spread.length)]!);
  return { skus: hot ? [hot, ...spread] : spread, pick };
}

/**
 * The books of every SKU of a round against the 201 answers it got, as one Books for the round, and what each SKU
 * had sold by then. `slack`: units the service may have sold without an answer (0: the books must be exact).
 */
async function checkSetBooks(
  ctx: RunContext,
  spec: SalesSpec,
  set: SkuSet,
  round: RoundResult,
  slack: number,
  soldBefore: Record<string, number> = {},
): Promise<Books & { soldBySku: Record<string, number> }> {
  const all: Books[] = [];
  for (const sku of set.skus) {
    // A spread round counts the units answered per SKU; a one-SKU round's 201s are all that SKU's.
    const answeredUnits = round.answeredBySku
      ? (round.answeredBySku[sku] ?? 0)
      : (round.statusCounts[201] ?? 0) * ctx.settings.quantity;
    const db = spec.auditInPostgres === false ? null : ctx.db;
    const question = { sku, answeredUnits, slack, soldBefore: soldBefore[sku], stockIn: spec.stockIn };
    all.push(await checkBooks(ctx.api(spec.service), db, question));
  }
  const soldBySku = Object.fromEntries(set.skus.map((sku, i) => [sku, all[i]!.sold]));
  if (all.length === 1) return { ...all[0]!, soldBySku };
  const sum = (pick: (b: Books) => number) => all.reduce((total, b) => total + pick(b), 0);
  const failed = all.flatMap((b, i) =>
    b.checks.filter((c) => !c.ok).map((c) => ({ ...c, name: `${set.skus[i]}: ${c.name}` })),
  );
  const summary = { name: `books of ${all.length} SKUs`, ok: failed.length === 0, detail: `${failed.length} failed` };
  return {
    ok: failed.length === 0,
    checks: [summary, ...failed],
    stock: sum((b) => b.stock),
    available: sum((b) => b.available),
    sold: sum((b) => b.sold),
    answeredUnits: sum((b) => b.answeredUnits),
    oversold: sum((b) => b.oversold),
    soldBySku,
  };
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

/**
 * `measureSales` with a webhook endpoint registered for every event type: a receiver in this process that answers
 * 204 to each delivery. Afterwards: how many deliveries it got, and the outbox rows the sequencer had not moved yet.
 */
export async function measureWithWebhook(ctx: RunContext, spec: SalesSpec) {
  let delivered = 0;
  const receiver = createServer((req, res) => {
    req.resume().on('end', () => {
      delivered++;
      res.writeHead(204).end();
    });
  });
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  const { service } = spec;
  const headers = ctx.api(service).adminHeaders;
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const hook = await fetch(`${service.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ url, types: EVENT_TYPES }),
  });
  if (hook.status !== 201) throw new Error(`registering a webhook answered ${hook.status}: ${await hook.text()}`);
  const { id } = (await hook.json()) as { id: string };
  try {
    const result = await measureSales(ctx, spec);
    const outbox = ctx.db && (await sql<{ n: number }>`select count(*)::int as n from event_outbox`.execute(ctx.db));
    return { ...result, delivered, outboxAfter: outbox?.rows[0]?.n };
  } finally {
    await fetch(`${service.url}/webhooks/${id}`, { method: 'DELETE', headers });
    receiver.close();
  }
}

export type Books = Awaited<ReturnType<typeof checkBooks>>;

/**
 * Checks a SKU's books through the API and, when reachable, straight in Postgres with the tests' books checker.
 * `answeredUnits`: Σ quantities of the 201 answers the load generator received. `slack`: 0 when every request was
 * answered, so units sold must equal them; a warm-up round is cut off by time and may leave up to `slack` units
 * unanswered that the service still sold. `soldBefore`: units sold before the round (spread traffic measures on the
 * SKUs its warm-up used). `stockIn`: where the stock lives, the SKU's segments (the product) or the Redis baseline's
 * counter.
 */
export async function checkBooks(
  api: StockApi,
  db: Db | null,
  question: { sku: string; answeredUnits: number; slack?: number; soldBefore?: number; stockIn?: string },
) {
  const { sku, answeredUnits, slack = 0, soldBefore: before = 0 } = question;
  const checks: { name: string; ok: boolean; detail: string }[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const view = await api.sku(sku);
  const { sold, stock } = view;
  const counter = question.stockIn === 'redis-counter';
  const available = counter ? ((await api.redisCounter(sku)) ?? view.available) : view.available;
  if (!counter) {
    const negative = view.segmentStock.filter((s) => s.available < 0).length;
    check('no segment below 0 (API)', negative === 0, `${negative} negative of ${view.segmentStock.length}`);
  }
  check(
    slack
      ? 'units sold ≥ Σ 201 quantities, by at most the unanswered requests (API)'
      : 'units sold = Σ 201 quantities (API)',
    sold - before >= answeredUnits && sold - before - answeredUnits <= slack,
    `sold ${sold}${before ? ` (${before} before the round)` : ''}, answered ${answeredUnits}${slack ? `, unanswered ≤ ${slack}` : ''}`,
  );
  check('available + sold = stock (API)', available + sold === stock, `${available} + ${sold} vs ${stock}`);
  if (db) {
    const audit = await auditStock(db, sku);
    if (!audit) throw new Error(`SKU ${sku} is not in Postgres`);
    check('Σ ledger = units sold (Postgres)', audit.sold === sold, `ledger ${audit.sold}, API ${sold}`);
    // The Redis counter baseline keeps its stock in Redis: its segments never go down, so only its ledger is checked.
    const wrong = counter ? undefined : booksViolations(audit);
    if (wrong)
      check('books exact (Postgres, the tests’ books checker)', wrong.length === 0, wrong.join('; ') || 'exact');
  }
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
