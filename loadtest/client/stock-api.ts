import type { SkuView } from '../../src/inventory/sku-view.js';

const skuPath = (sku: string) => `/skus/${encodeURIComponent(sku)}`;

/** The service's HTTP API, as much of it as the load test needs. */
export class StockApi {
  /** Headers an admin route needs (and the benchmark routes, when the service has a token). */
  readonly adminHeaders: Record<string, string>;

  constructor(
    private readonly baseUrl: string,
    adminToken: string | undefined,
  ) {
    this.adminHeaders = adminToken ? { authorization: `Bearer ${adminToken}` } : {};
  }

  /** `settings`: more of the SKU's fields (a sale window, a limit). */
  createSku = (sku: string, stock: number, segments: number, settings = {}) =>
    this.call(201, 'POST', '/skus', { sku, stock, segments, ...settings });
  updateSku = (sku: string, changes: Record<string, unknown>) => this.call(200, 'PATCH', skuPath(sku), changes);
  sku = (sku: string) => this.call(200, 'GET', skuPath(sku));
  restock = (sku: string, quantity: number) => this.call(200, 'POST', `${skuPath(sku)}/restock`, { quantity });
  /** The lock-free Redis baseline's stock counter; null before its first sale. */
  redisCounter = async (sku: string) =>
    (
      await this.call<{ available: number | null }>(
        200,
        'GET',
        `/bench/lock-free/redis-counter/${encodeURIComponent(sku)}`,
      )
    ).available;

  /** Places an order; answers the status. */
  async order(sku: string, quantity: number): Promise<number> {
    const response = await this.send('POST', '/orders', { sku, quantity });
    await response.text();
    return response.status;
  }

  /** A request that must answer `status`; answers the JSON body. */
  async call<T = SkuView>(status: number, method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body);
    const text = await response.text();
    if (response.status !== status)
      throw new Error(`${method} ${path}: expected ${status}, got ${response.status}: ${text.slice(0, 300)}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  private send(method: string, path: string, body?: unknown): Promise<Response> {
    const json: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' };
    const headers = { ...json, ...this.adminHeaders };
    return fetch(this.baseUrl + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  }
}

type Sample = { labels: Record<string, string>; value: number };

/** A scrape of a Prometheus text endpoint, reduced to what the load test reads: samples by name and labels. */
export class MetricsSnapshot {
  private constructor(private readonly samples: Map<string, Sample[]>) {}

  /** Retries: right after a round the target may still be closing sockets. `token` guards GET /metrics, if set. */
  static async scrape(url: string, token?: string, attempts = 3): Promise<MetricsSnapshot> {
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
        if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
        const samples = new Map<string, Sample[]>();
        for (const [, name, pairs, value] of (await response.text()).matchAll(
          /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/gm,
        )) {
          const labels = Object.fromEntries(
            [...(pairs ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]),
          );
          samples.set(name!, [...(samples.get(name!) ?? []), { labels, value: Number(value) }]);
        }
        return new MetricsSnapshot(samples);
      } catch (error) {
        if (attempt >= attempts) throw new Error(`GET ${url} failed: ${(error as Error).message}`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }

  /** Σ of the samples of `name`. */
  sum(name: string): number {
    return (this.samples.get(name) ?? []).reduce((total, s) => total + s.value, 0);
  }

  /** Values of one label across the samples of `name`, with their sums. */
  byLabel(name: string, label: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { labels, value } of this.samples.get(name) ?? [])
      if (labels[label] !== undefined) out[labels[label]] = (out[labels[label]] ?? 0) + value;
    return out;
  }
}

/** Change of a histogram between two scrapes: its mean, and the bucket bound that holds a quantile. */
export function histogramDelta(before: MetricsSnapshot, after: MetricsSnapshot, name: string) {
  const earlier = before.byLabel(`${name}_bucket`, 'le');
  const buckets = Object.entries(after.byLabel(`${name}_bucket`, 'le'))
    .map(([le, count]) => [le === '+Inf' ? Infinity : Number(le), count - (earlier[le] ?? 0)] as const)
    .sort((x, y) => x[0] - y[0]);
  const count = after.sum(`${name}_count`) - before.sum(`${name}_count`);
  const sum = after.sum(`${name}_sum`) - before.sum(`${name}_sum`);
  /** Upper bound of the bucket holding quantile `q`: a conservative estimate. */
  const quantileUpperBound = (q: number) => buckets.find(([, n]) => n >= q * count)?.[0] ?? Infinity;
  return { sum, mean: count > 0 ? sum / count : 0, quantileUpperBound };
}
