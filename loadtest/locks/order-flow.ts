import { setTimeout as sleep } from 'node:timers/promises';
import { redisTopology } from '../../src/redis/connections.js';
import { StockService } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import type { LockBackendKind } from '../../src/lock/distributed-lock.js';
import { createLogger } from '../../src/logger.js';
import type { BackendStores } from './backend-stores.js';

export interface OrderFlowSpec {
  backend: LockBackendKind;
  clients: number;
  segments: number;
  /** CRITICAL_SECTION_DELAY_MS: a business step held inside the segment lock. */
  holdMs: number;
  /** LOCK_WAIT_MS: how long an order may wait before 503. */
  lockWaitMs: number;
  /** Told apart in the report, e.g. 'one node of three down'. */
  variant?: string;
  warmupMs: number;
  durationMs: number;
}

export interface OrderFlowResult {
  backend: LockBackendKind;
  variant?: string | undefined;
  clients: number;
  segments: number;
  holdMs: number;
  ordersPerSecond: number;
  maxLatencyMs: number;
  p99LatencyMs: number;
  /** Answers other than 201 in the measured window (503 when the wait budget ran out). */
  refused: number;
}

/**
 * The segmented order flow, unchanged, on one lock backend: the service in this process with LOCK_BACKEND set,
 * `clients` loops of POST /orders (quantity 1) against one SKU with far more stock than can sell. Every backend runs
 * the same service against the same Redis and Postgres, so only the lock differs.
 */
export async function runOrderFlow(stores: BackendStores, spec: OrderFlowSpec): Promise<OrderFlowResult> {
  const config = loadConfig({
    LOG_LEVEL: 'silent',
    REDIS_URL: stores.redisUrl,
    DATABASE_URL: stores.databaseUrl,
    LOCK_BACKEND: spec.backend,
    REDIS_LOCK_URLS: stores.lockNodeUrls.join(','),
    ZOOKEEPER_CONNECT: stores.zookeeperConnect ?? '',
    CRITICAL_SECTION_DELAY_MS: String(spec.holdMs),
    LOCK_WAIT_MS: String(spec.lockWaitMs),
    PG_POOL_SIZE: '40',
  });
  const service = new StockService(config, createLogger('silent'), {
    redis: redisTopology(config),
    databaseUrl: stores.databaseUrl!,
  });
  const port = await service.start(0, '127.0.0.1');
  const base = `http://127.0.0.1:${port}`;
  try {
    const sku = `flow-${spec.backend}-${Date.now().toString(36)}`;
    const created = await fetch(`${base}/skus`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sku, stock: 1_000_000_000, segments: spec.segments }),
    });
    if (created.status !== 201) throw new Error(`creating ${sku}: ${created.status} ${await created.text()}`);

    const started = performance.now();
    const windowStart = started + spec.warmupMs;
    const windowEnd = windowStart + spec.durationMs;
    const latencies: number[] = [];
    let placed = 0;
    let refused = 0;
    const client = async () => {
      while (performance.now() < windowEnd) {
        const sentAt = performance.now();
        const response = await fetch(`${base}/orders`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ sku, quantity: 1 }),
        });
        await response.arrayBuffer();
        const doneAt = performance.now();
        if (sentAt < windowStart || doneAt > windowEnd) continue;
        latencies.push(doneAt - sentAt);
        if (response.status === 201) placed++;
        else refused++;
      }
    };
    await Promise.all(Array.from({ length: spec.clients }, client));
    latencies.sort((a, b) => a - b);
    return {
      backend: spec.backend,
      variant: spec.variant,
      clients: spec.clients,
      segments: spec.segments,
      holdMs: spec.holdMs,
      ordersPerSecond: placed / (spec.durationMs / 1000),
      maxLatencyMs: latencies.at(-1) ?? 0,
      p99LatencyMs: latencies[Math.floor(latencies.length * 0.99)] ?? 0,
      refused,
    };
  } finally {
    await service.stop();
    // Let the stopped service's connections close before the next backend starts.
    await sleep(200);
  }
}

export function orderFlowReport(results: OrderFlowResult[], context: string): string {
  const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
  const lines = [
    context,
    '',
    '| backend | segments | hold (ms) | orders/s | × redis | p99 latency (ms) | max latency (ms) | not placed |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    const redis = results.find((x) => x.backend === 'redis' && x.segments === r.segments && x.holdMs === r.holdMs);
    const relative = redis ? (r.ordersPerSecond / redis.ordersPerSecond).toFixed(2) : '–';
    lines.push(
      `| ${r.backend}${r.variant ? `, ${r.variant}` : ''} | ${r.segments} | ${r.holdMs} | ${fmt(r.ordersPerSecond)} | ${relative} | ${fmt(r.p99LatencyMs)} | ${fmt(r.maxLatencyMs)} | ${r.refused} |`,
    );
  }
  return lines.join('\n');
}
