import { MetricsSnapshot } from '../client/prometheus.js';
import type { ServiceTarget } from '../infra/service-process.js';
import type { SoldOutCase } from '../results.js';
import { runRound } from '../runner/round.js';
import type { RunContext } from './context.js';
import { measuredAmount, settle } from './sales.js';

const UNITS_PER_SEGMENT = 50;
const RESTOCK = 100;

/**
 * Orders for a SKU that sold out: sold to 0 first (one order per segment, so the instance saw every segment empty),
 * then a round of one-unit orders, each of which should be refused at once with 409. Then a restock, after which the
 * very next order must succeed.
 */
export async function runSoldOut(ctx: RunContext, service: ServiceTarget, segments: number): Promise<SoldOutCase> {
  const api = ctx.api(service);
  const sku = ctx.skuName(`sold-out-${segments}`);
  await api.createSku(sku, segments * UNITS_PER_SEGMENT, segments);
  for (let i = 0; i < segments; i++) {
    const answer = await api.order(sku, UNITS_PER_SEGMENT);
    if (answer.status !== 201) throw new Error(`selling out ${sku}: order ${i} answered ${answer.status}`);
  }
  const spec = {
    baseUrl: service.url,
    path: '/orders',
    body: { sku, quantity: 1 },
    connections: ctx.settings.connections,
    timeoutSeconds: ctx.settings.timeoutSeconds,
  };
  const label = `sold out · ${segments} segments`;
  await ctx.waitForQuiet(service);
  const warmup = await runRound(
    { ...spec, title: `${label} · warm-up`, durationSeconds: ctx.settings.warmupSeconds },
    409,
    ctx.progress,
  );
  await settle(service, ctx.settings.timeoutSeconds);
  const before = await MetricsSnapshot.scrape(service.metricsUrl, service.adminToken);
  const cpu = ctx.meterCpu(service);
  const measured = await runRound(
    { ...spec, title: label, amount: measuredAmount(ctx, warmup, ctx.settings.connections, 409) },
    409,
    ctx.progress,
  );
  const cpuUsage = cpu();
  const after = await MetricsSnapshot.scrape(service.metricsUrl, service.adminToken);
  const attempts = after.sum('stock_lock_attempts_total') - before.sum('stock_lock_attempts_total');

  const restocked = await api.restock(sku, RESTOCK);
  const started = performance.now();
  const first = await api.order(sku, 1);
  const firstOrderMs = performance.now() - started;
  return {
    id: `sold-out-${segments}`,
    label,
    segments,
    warmup,
    measured,
    refusalsPerSecond: measured.ratePerSecond[409] ?? 0,
    lockAttemptsPerRequest: measured.responses > 0 ? attempts / measured.responses : null,
    cpu: cpuUsage,
    restock: { quantity: RESTOCK, firstOrderStatus: first.status, firstOrderMs, availableAfter: restocked.available },
  };
}
