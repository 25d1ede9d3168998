import type { ServiceTarget } from '../infra/service-process.js';
import type { OversellCase } from '../results.js';
import { runRound } from '../runner/round.js';
import { checkBooks } from './books.js';
import type { RunContext } from './context.js';

export interface GuardSpec {
  id: string;
  label: string;
  guard: string;
  /** The oversell route of a guard mode, or the product's own POST /orders. */
  path: string;
}

export const guards = {
  none: { id: 'none', label: 'no lock', guard: 'none', path: '/bench/oversell/none' },
  localMutex: {
    id: 'local-mutex',
    label: 'process-local mutex',
    guard: 'local-mutex',
    path: '/bench/oversell/local-mutex',
  },
  redisLock: { id: 'redis-lock', label: 'Redis segment lock', guard: 'redis-lock', path: '/bench/oversell/redis-lock' },
  product: { id: 'product', label: 'the product, POST /orders', guard: 'redis-lock', path: '/orders' },
} satisfies Record<string, GuardSpec>;

/**
 * The oversell demonstration (reference article 000's experiment): a single-segment SKU, three times as many
 * one-unit orders as it has stock, all at once; then the books. Without a lock shared by every instance the ledger
 * holds more than the stock went down by.
 */
export async function runOversell(
  ctx: RunContext,
  service: ServiceTarget,
  instances: number,
  guard: GuardSpec,
): Promise<OversellCase> {
  const api = ctx.api(service);
  const stock = ctx.settings.oversellStock;
  const requests = stock * 3;
  const sku = ctx.skuName(`oversell-${guard.id}-${instances}`);
  await api.createSku(sku, stock, 1);
  const label = `oversell · ${guard.label} · ${instances} instance${instances > 1 ? 's' : ''}`;
  const round = await runRound(
    {
      title: label,
      baseUrl: service.url,
      path: guard.path,
      body: { sku, quantity: 1 },
      headers: api.adminHeaders,
      connections: Math.min(ctx.settings.connections, requests),
      amount: requests,
      timeoutSeconds: ctx.settings.timeoutSeconds,
    },
    201,
    ctx.progress,
  );
  const books = await checkBooks(api, ctx.db, { sku, answeredUnits: round.statusCounts[201] ?? 0, exact: true });
  return {
    id: `oversell-${guard.id}-${instances}`,
    label,
    guard: guard.guard,
    path: guard.path,
    instances,
    stock,
    requests,
    round,
    books,
  };
}
