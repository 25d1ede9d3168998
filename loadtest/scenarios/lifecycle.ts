import type { ServiceTarget } from '../infra/service-process.js';
import type { LifecycleCase } from '../results.js';
import { type RoundResult, type RoundSpec, runRound } from '../runner/round.js';
import type { RunContext } from './context.js';
import { measuredAmount, settle } from './sales.js';

/** Stock no round can sell out: both rounds measure the order path, not the refusals after it. */
const STOCK = 1_000_000_000;
const HOLD_SECONDS = 600;

/**
 * What the lifecycle costs a shop: one-unit orders placed confirmed at once, against one-unit reservations each
 * confirmed by the next request of the same connection, on one SKU of `segments` segments of the same service. Both
 * rates count orders that ended confirmed.
 */
export async function runLifecycle(ctx: RunContext, service: ServiceTarget, segments: number): Promise<LifecycleCase> {
  const api = ctx.api(service);
  const base = {
    baseUrl: service.url,
    path: '/orders',
    connections: ctx.settings.connections,
    timeoutSeconds: ctx.settings.timeoutSeconds,
  };
  const measure = async (spec: Omit<RoundSpec, 'title'>, title: string, status: number) => {
    await ctx.waitForQuiet(service);
    const warmup = await runRound(
      { ...spec, title: `${title} · warm-up`, durationSeconds: ctx.settings.warmupSeconds },
      status,
      ctx.progress,
    );
    await settle(service, ctx.settings.timeoutSeconds);
    const cpu = ctx.meterCpu(service);
    // Twice the requests of a direct round for the same number of orders: a reservation and its confirmation.
    const requests = measuredAmount(ctx, warmup, ctx.settings.connections, status) * (spec.confirmEach ? 2 : 1);
    const measured: RoundResult = await runRound({ ...spec, title, amount: requests }, status, ctx.progress);
    return { measured, cpu: cpu() };
  };

  const directSku = ctx.skuName(`lifecycle-direct-${segments}`);
  await api.createSku(directSku, STOCK, segments);
  const direct = await measure(
    { ...base, body: { sku: directSku, quantity: 1 } },
    `place directly · ${segments} segments`,
    201,
  );
  const reservedSku = ctx.skuName(`lifecycle-reserve-${segments}`);
  await api.createSku(reservedSku, STOCK, segments);
  const reserved = await measure(
    { ...base, body: { sku: reservedSku, quantity: 1, holdSeconds: HOLD_SECONDS }, confirmEach: true },
    `reserve then confirm · ${segments} segments`,
    200,
  );
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
