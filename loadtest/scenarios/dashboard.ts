import type { ServiceTarget } from '../infra/service-process.js';
import type { DashboardCase } from '../results.js';
import { runRound } from '../runner/round.js';
import type { RunContext } from './context.js';
import { measuredAmount, settle } from './sales.js';

/**
 * What open dashboards cost the order path: the same measured round of one-unit orders on one SKU with no dashboard
 * watching, then with `watchers` event streams open on that SKU (what that many open dashboards cost), then without
 * again.
 */
export async function runDashboardCost(
  ctx: RunContext,
  service: ServiceTarget,
  segments: number,
  watcherCount: number,
): Promise<DashboardCase> {
  const { settings } = ctx;
  const api = ctx.api(service);
  const sku = ctx.skuName('dashboard');
  await api.createSku(sku, 1_000_000_000, segments);
  const round = (title: string, extra: { durationSeconds?: number; amount?: number }) =>
    runRound(
      {
        title: `dashboard cost · ${title}`,
        baseUrl: service.url,
        path: '/orders',
        body: { sku, quantity: settings.quantity },
        headers: api.adminHeaders,
        connections: settings.connections,
        timeoutSeconds: settings.timeoutSeconds,
        ...extra,
      },
      201,
      ctx.progress,
    );
  const warmup = await round('warm-up', { durationSeconds: settings.warmupSeconds });
  await settle(service, settings.timeoutSeconds);
  const amount = measuredAmount(ctx, warmup, settings.connections);
  const unwatched = await round('no dashboard', { amount });
  await settle(service, settings.timeoutSeconds);

  const watchers = Array.from({ length: watcherCount }, () => new AbortController());
  const events: number[] = watchers.map(() => 0);
  await Promise.all(
    watchers.map(async (controller, i) => {
      const response = await fetch(`${service.url}/dashboard/events?sku=${sku}`, {
        headers: api.adminHeaders,
        signal: controller.signal,
      });
      void (async () => {
        try {
          for await (const _chunk of response.body!) events[i]!++;
        } catch {
          // Aborted at the end of the round.
        }
      })();
    }),
  );
  const watched = await round(`${watcherCount} dashboards`, { amount });
  for (const controller of watchers) controller.abort();
  await settle(service, settings.timeoutSeconds);
  const again = await round('no dashboard again', { amount });
  return {
    watchers: watcherCount,
    rounds: [
      { label: 'no dashboard', round: unwatched },
      { label: `${watcherCount} dashboards watching`, round: watched },
      { label: 'no dashboard again', round: again },
    ],
    minEventsPerWatcher: Math.min(...events),
  };
}
