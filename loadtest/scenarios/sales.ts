import { setTimeout as sleep } from 'node:timers/promises';
import { waitFor } from '../../test/support/wait-for.js';
import { HistogramDelta, MetricsSnapshot } from '../client/prometheus.js';
import type { ServerStats } from '../infra/server-stats.js';
import { readMemory, type ServiceTarget } from '../infra/service-process.js';
import type { Books, CeilingCase, LockStats, MemoryStats, Profile, SalesCase } from '../results.js';
import { type RoundResult, runRound } from '../runner/round.js';
import { type BooksQuestion, checkBooks } from './books.js';
import type { RunContext } from './context.js';

/** Stock of a warm-up SKU: far beyond what a few seconds can sell. */
const WARMUP_STOCK = 1_000_000_000;
/** A measured SKU holds this many times the units its round can sell at most, so it never runs out. */
const STOCK_HEADROOM = 4;
/** Spread SKUs are created this many at a time. */
const SKU_CREATION_BATCH = 16;

export interface SalesSpec {
  id: string;
  label: string;
  service: ServiceTarget;
  path: string;
  profile: Profile;
  /** Whether the service combines queued orders (COMBINE_MAX_BATCH > 1). */
  combining: boolean;
  instances: number;
  segments: number;
  connections?: number;
  stockIn?: 'segments' | 'redis-counter';
  /** Audit the books in Postgres too (default); the alternative keeps its own tables, checked through its API. */
  auditInPostgres?: boolean;
  /** Whether this path goes through the product's order flow (and so feeds its lock metrics). */
  lockMetrics: boolean;
  /** Read the servers' own counters around the measured round (Redis commands and CPU, Postgres statements). */
  serverStats?: ServerStats;
  /** Which Redis the service uses, when the case compares them. */
  redis?: string;
  /**
   * Spread traffic: orders over this many SKUs, a random one per request; `hotShare` of them (0 for pure spread) go
   * to one hot SKU instead. Without it every order goes to one SKU.
   */
  traffic?: { skus: number; hotShare: number };
}

/** The SKUs of one round, and how each request picks one (undefined: every request goes to the first). */
interface SkuSet {
  skus: string[];
  pick?: () => string;
}

/**
 * The common shape of a throughput case: a fresh warm-up SKU (or, for spread traffic, SKUs) and a timed warm-up
 * round, then a fresh SKU sized from the warm-up's rate (spread traffic: the same SKUs) and a measured round of a
 * fixed number of requests, bracketed by metric scrapes; the books after each round.
 */
export async function measureSales(ctx: RunContext, spec: SalesSpec): Promise<SalesCase> {
  const { settings } = ctx;
  const api = ctx.api(spec.service);
  const connections = spec.connections ?? settings.connections;
  const quantity = settings.quantity;
  const headers = api.adminHeaders;

  const warm = await createSkus(ctx, spec, `${spec.id}-warm`, () => WARMUP_STOCK);
  await ctx.waitForQuiet(spec.service);
  const warmup = await runRound(
    {
      title: `${spec.label} · warm-up`,
      baseUrl: spec.service.url,
      path: spec.path,
      body: { sku: warm.skus[0], quantity },
      pickSku: warm.pick,
      headers,
      connections,
      durationSeconds: settings.warmupSeconds,
      timeoutSeconds: settings.timeoutSeconds,
    },
    201,
    ctx.progress,
  );

  await settle(spec.service, ctx.settings.timeoutSeconds);
  const amount = measuredAmount(ctx, warmup, connections);
  const stockIn = spec.stockIn ?? 'segments';
  const db = spec.auditInPostgres === false ? null : ctx.db;
  const { soldBySku: warmSold, ...warmupBooks } = await checkSetBooks(api, db, warm, warmup, quantity, {
    exact: false,
    unansweredAtMost: connections * quantity,
    stockIn,
  });
  // One SKU: a fresh one holding STOCK_HEADROOM × what the round can sell. Spread traffic measures on the SKUs the
  // warm-up used (a SKU's first order costs more than the rest: measuring on fresh ones would measure first orders),
  // counting each SKU's sales from what the warm-up left.
  const measuredSet = spec.traffic
    ? warm
    : await createSkus(ctx, spec, spec.id, () => Math.max(10_000, amount * quantity * STOCK_HEADROOM));
  const memory = new MemorySampler(spec.service.pids());
  const before = spec.lockMetrics
    ? await MetricsSnapshot.scrape(spec.service.metricsUrl, spec.service.adminToken)
    : null;
  const endServerStats = await spec.serverStats?.start();
  const cpu = ctx.meterCpu(spec.service);
  const measured = await runRound(
    {
      title: spec.label,
      baseUrl: spec.service.url,
      path: spec.path,
      body: { sku: measuredSet.skus[0], quantity },
      pickSku: measuredSet.pick,
      headers,
      connections,
      amount,
      timeoutSeconds: settings.timeoutSeconds,
    },
    201,
    ctx.progress,
  );
  const cpuUsage = cpu();
  const serverCost = await endServerStats?.(measured.statusCounts[201] ?? 0);
  const after = before ? await MetricsSnapshot.scrape(spec.service.metricsUrl, spec.service.adminToken) : null;
  const memoryStats = memory.stop();

  const { soldBySku: _sold, ...books } = await checkSetBooks(api, db, measuredSet, measured, quantity, {
    exact: true,
    stockIn,
    ...(spec.traffic && { soldBefore: warmSold }),
  });
  return {
    id: spec.id,
    label: spec.label,
    path: spec.path,
    profile: spec.profile,
    combining: spec.combining,
    instances: spec.instances,
    segments: spec.segments,
    connections,
    quantity,
    warmup,
    measured,
    ordersPerSecond: measured.ratePerSecond[201] ?? 0,
    lock: before && after ? lockStats(before, after, measured.durationSeconds, spec.segments) : null,
    books,
    warmupBooks,
    memory: memoryStats,
    cpu: cpuUsage,
    ...(serverCost && { serverCost }),
    ...(spec.redis && { redis: spec.redis }),
    ...(spec.traffic && { traffic: spec.traffic.hotShare > 0 ? 'mixed' : 'spread', skus: spec.traffic.skus }),
  };
}

/**
 * The round's SKUs: one, or (spread traffic) `traffic.skus` of them plus, for mixed traffic, one hot SKU first.
 * `stock(hot)` sizes each.
 */
async function createSkus(
  ctx: RunContext,
  spec: SalesSpec,
  tag: string,
  stock: (hot: boolean) => number,
): Promise<SkuSet> {
  const api = ctx.api(spec.service);
  const create = async (name: string, hot: boolean) => {
    await api.createSku(name, stock(hot), spec.segments);
    return name;
  };
  if (!spec.traffic) return { skus: [await create(ctx.skuName(tag), true)] };
  const { skus: count, hotShare } = spec.traffic;
  const hot = hotShare > 0 ? [await create(ctx.skuName(`${tag}-hot`), true)] : [];
  const spread: string[] = [];
  const names = Array.from({ length: count }, (_, i) => ctx.skuName(`${tag}-${i}`));
  for (let i = 0; i < names.length; i += SKU_CREATION_BATCH) {
    spread.push(...(await Promise.all(names.slice(i, i + SKU_CREATION_BATCH).map((name) => create(name, false)))));
  }
  const pick = () =>
    hot.length && Math.random() < hotShare ? hot[0]! : spread[Math.floor(Math.random() * spread.length)]!;
  return { skus: [...hot, ...spread], pick };
}

/**
 * The books of every SKU of a round, each against the 201 answers it got (beyond what it had sold before the round,
 * when `soldBefore` is given); one Books for the round, and what each SKU had sold.
 */
async function checkSetBooks(
  api: ReturnType<RunContext['api']>,
  db: RunContext['db'],
  set: SkuSet,
  round: RoundResult,
  quantity: number,
  question: Pick<BooksQuestion, 'exact' | 'unansweredAtMost' | 'stockIn'> & { soldBefore?: Record<string, number> },
): Promise<Books & { soldBySku: Record<string, number> }> {
  const answered = (sku: string) =>
    round.answeredBySku ? (round.answeredBySku[sku] ?? 0) : (round.statusCounts[201] ?? 0) * quantity;
  const all: Books[] = [];
  const soldBySku: Record<string, number> = {};
  for (const sku of set.skus) {
    const { soldBefore, ...rest } = question;
    const books = await checkBooks(api, db, {
      sku,
      answeredUnits: answered(sku),
      soldBefore: soldBefore?.[sku],
      ...rest,
    });
    soldBySku[sku] = books.sold;
    all.push(books);
  }
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

/**
 * A freshly started process runs its first seconds unoptimised (JIT) and with cold pools: orders (which go through
 * the whole HTTP stack too) before any measurement, on a throwaway SKU, so the first case is not the one that pays.
 */
export async function primeService(ctx: RunContext, service: ServiceTarget): Promise<void> {
  const api = ctx.api(service);
  const sku = ctx.skuName('prime');
  await api.createSku(sku, WARMUP_STOCK, 4);
  const round = (title: string, path: string, expected: number) =>
    runRound(
      {
        title: `priming ${service.label} · ${title}`,
        baseUrl: service.url,
        path,
        body: { sku, quantity: ctx.settings.quantity },
        connections: ctx.settings.connections,
        durationSeconds: ctx.settings.warmupSeconds,
        timeoutSeconds: ctx.settings.timeoutSeconds,
      },
      expected,
      ctx.progress,
    );
  await round('orders', '/orders', 201);
  await settle(service, ctx.settings.timeoutSeconds);
}

/**
 * The HTTP ceiling: the same stack answering POST /bench/echo with the order's body (200); or, with `path` and
 * `status`, another echo (the bare express app's POST /orders, 201).
 */
export async function measureCeiling(
  ctx: RunContext,
  spec: { id: string; label: string; service: ServiceTarget; instances: number; path?: string; status?: number },
): Promise<CeilingCase> {
  const { settings } = ctx;
  const status = spec.status ?? 200;
  const round = (extra: { durationSeconds?: number; amount?: number }, title: string) =>
    runRound(
      {
        title,
        baseUrl: spec.service.url,
        path: spec.path ?? '/bench/echo',
        body: { sku: 'ceiling', quantity: settings.quantity },
        connections: settings.connections,
        timeoutSeconds: settings.timeoutSeconds,
        ...extra,
      },
      status,
      ctx.progress,
    );
  await ctx.waitForQuiet(spec.service);
  const warmup = await round({ durationSeconds: settings.warmupSeconds }, `${spec.label} · warm-up`);
  await settle(spec.service, settings.timeoutSeconds);
  const cpu = ctx.meterCpu(spec.service);
  const measured = await round({ amount: measuredAmount(ctx, warmup, settings.connections, status) }, spec.label);
  return {
    id: spec.id,
    label: spec.label,
    instances: spec.instances,
    warmup,
    measured,
    perSecond: measured.ratePerSecond[status] ?? 0,
    cpu: cpu(),
    ...(spec.path && { path: spec.path }),
  };
}

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
  const rate = warmup.ratePerSecond[status] ?? 0;
  const wanted = Math.round(rate * ctx.settings.measureSeconds);
  return Math.max(connections * 2, Math.min(wanted, ctx.settings.maxRequestsPerRound));
}

/** Lock figures for a measured round, from the service's metrics before and after it. */
export function lockStats(
  before: MetricsSnapshot,
  after: MetricsSnapshot,
  seconds: number,
  segments: number,
): LockStats {
  const delta = (name: string) => after.sum(name) - before.sum(name);
  const outcomesBefore = before.byLabel('stock_orders_total', 'outcome');
  const outcomes: Record<string, number> = {};
  for (const [outcome, value] of Object.entries(after.byLabel('stock_orders_total', 'outcome'))) {
    const change = value - (outcomesBefore[outcome] ?? 0);
    if (change > 0) outcomes[outcome] = change;
  }
  const answered = Object.values(outcomes).reduce((a, b) => a + b, 0);
  const perOrder = (value: number) => (answered > 0 ? value / answered : 0);
  const visits = HistogramDelta.between(before, after, 'stock_order_segment_visits');
  const wait = HistogramDelta.between(before, after, 'stock_lock_wait_seconds');
  const hold = HistogramDelta.between(before, after, 'stock_lock_hold_seconds');
  return {
    outcomes,
    lockAttemptsPerOrder: perOrder(delta('stock_lock_attempts_total')),
    busyPerOrder: perOrder(delta('stock_lock_busy_total')),
    waitsPerOrder: perOrder(delta('stock_lock_waits_total')),
    segmentVisitsP99: visits.quantileUpperBound(0.99),
    meanLockWaitMs: wait.mean * 1000,
    lockWaitP99Ms: wait.quantileUpperBound(0.99) * 1000,
    meanHoldMs: hold.mean * 1000,
    acquisitionsPerSecond: delta('stock_lock_acquisitions_total') / seconds,
    lockUtilisation: hold.sum / (seconds * segments),
    fencedOut: delta('stock_fenced_out_total'),
    eventLoopLagP99Ms: after.sum('nodejs_eventloop_lag_p99_seconds') * 1000,
  };
}

/** Samples the RSS of local service processes while a round runs. */
export class MemorySampler {
  private maxRss = 0;
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(private readonly pids: number[]) {
    if (pids.length > 0) this.timer = setInterval(() => this.sample(), 250);
  }

  stop(): MemoryStats | null {
    if (!this.timer) return null;
    clearInterval(this.timer);
    const samples = this.sample();
    return { maxRssBytes: this.maxRss, peakRssBytes: Math.max(0, ...samples.map((s) => s.peakRssBytes)) };
  }

  private sample() {
    const samples = readMemory(this.pids);
    for (const s of samples) this.maxRss = Math.max(this.maxRss, s.rssBytes);
    return samples;
  }
}
