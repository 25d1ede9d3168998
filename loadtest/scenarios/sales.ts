import { setTimeout as sleep } from 'node:timers/promises';
import { HistogramDelta, MetricsSnapshot } from '../client/prometheus.js';
import type { ServerStats } from '../infra/server-stats.js';
import { readMemory, type ServiceTarget } from '../infra/service-process.js';
import type { CeilingCase, LockStats, MemoryStats, Profile, SalesCase } from '../results.js';
import { type RoundResult, runRound } from '../runner/round.js';
import { checkBooks } from './books.js';
import type { RunContext } from './context.js';

/** Stock of a warm-up SKU: far beyond what a few seconds can sell. */
const WARMUP_STOCK = 1_000_000_000;
/** A measured SKU holds this many times the units its round can sell at most, so it never runs out. */
const STOCK_HEADROOM = 4;

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
}

/**
 * The common shape of a throughput case: a fresh warm-up SKU and a timed warm-up round, then a fresh SKU sized from
 * the warm-up's rate and a measured round of a fixed number of requests, bracketed by metric scrapes; then the books
 * of both SKUs.
 */
export async function measureSales(ctx: RunContext, spec: SalesSpec): Promise<SalesCase> {
  const { settings } = ctx;
  const api = ctx.api(spec.service);
  const connections = spec.connections ?? settings.connections;
  const quantity = settings.quantity;
  const headers = api.adminHeaders;

  const warmSku = ctx.skuName(`${spec.id}-warm`);
  await api.createSku(warmSku, WARMUP_STOCK, spec.segments);
  await ctx.waitForQuiet(spec.service);
  const warmup = await runRound(
    {
      title: `${spec.label} · warm-up`,
      baseUrl: spec.service.url,
      path: spec.path,
      body: { sku: warmSku, quantity },
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
  const sku = ctx.skuName(spec.id);
  await api.createSku(sku, Math.max(10_000, amount * quantity * STOCK_HEADROOM), spec.segments);
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
      body: { sku, quantity },
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

  const stockIn = spec.stockIn ?? 'segments';
  const db = spec.auditInPostgres === false ? null : ctx.db;
  const books = await checkBooks(api, db, {
    sku,
    answeredUnits: (measured.statusCounts[201] ?? 0) * quantity,
    exact: true,
    stockIn,
  });
  const warmupBooks = await checkBooks(api, db, {
    sku: warmSku,
    answeredUnits: (warmup.statusCounts[201] ?? 0) * quantity,
    exact: false,
    unansweredAtMost: connections * quantity,
    stockIn,
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

/** The HTTP ceiling: the same stack answering POST /bench/echo with the order's body. */
export async function measureCeiling(
  ctx: RunContext,
  spec: { id: string; label: string; service: ServiceTarget; instances: number },
): Promise<CeilingCase> {
  const { settings } = ctx;
  const round = (extra: { durationSeconds?: number; amount?: number }, title: string) =>
    runRound(
      {
        title,
        baseUrl: spec.service.url,
        path: '/bench/echo',
        body: { sku: 'ceiling', quantity: settings.quantity },
        connections: settings.connections,
        timeoutSeconds: settings.timeoutSeconds,
        ...extra,
      },
      200,
      ctx.progress,
    );
  await ctx.waitForQuiet(spec.service);
  const warmup = await round({ durationSeconds: settings.warmupSeconds }, `${spec.label} · warm-up`);
  await settle(spec.service, settings.timeoutSeconds);
  const cpu = ctx.meterCpu(spec.service);
  const measured = await round({ amount: measuredAmount(ctx, warmup, settings.connections, 200) }, spec.label);
  return {
    id: spec.id,
    label: spec.label,
    instances: spec.instances,
    warmup,
    measured,
    perSecond: measured.ratePerSecond[200] ?? 0,
    cpu: cpu(),
  };
}

/**
 * Waits until the service has finished every order: a warm-up round stops on time, and orders it left in flight
 * (parked for a lock, up to the wait budget) must not run into the next round or its metrics. Requests to the
 * benchmark routes are not counted there; they finish within milliseconds, which the short pause covers.
 */
export async function settle(service: ServiceTarget, timeoutSeconds: number): Promise<void> {
  const deadline = Date.now() + timeoutSeconds * 1000;
  await sleep(100);
  while (Date.now() < deadline) {
    const inProgress = (await MetricsSnapshot.scrape(service.metricsUrl, service.adminToken)).sum(
      'stock_orders_in_progress',
    );
    if (inProgress === 0) return;
    await sleep(50);
  }
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
