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
  redisCounter = async (sku: string) => {
    const path = `/bench/lock-free/redis-counter/${encodeURIComponent(sku)}`;
    return (await this.call<{ available: number | null }>(200, 'GET', path)).available;
  };

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

type Sample = { name: string; labels: Record<string, string>; value: number };
const SAMPLE = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/gm;
/** A label value may hold commas and escaped quotes (`\"`): each label is read whole, once per scrape. */
const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;
const labelsOf = (text = '') => Object.fromEntries([...text.matchAll(LABEL)].map(([, key, value]) => [key, value]));

/** A scrape of a Prometheus text endpoint: each sample's name, labels and value. */
export class MetricsSnapshot {
  private constructor(private readonly samples: Sample[]) {}

  /** Retries: right after a round the target may still be closing sockets. `token` guards GET /metrics, if set. */
  static async scrape(url: string, token?: string, attempts = 3): Promise<MetricsSnapshot> {
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
        if (!response.ok) throw new Error(`GET ${url}: ${response.status}`);
        const samples = [...(await response.text()).matchAll(SAMPLE)];
        return new MetricsSnapshot(
          samples.map(([, name, labels, value]) => ({ name: name!, labels: labelsOf(labels), value: Number(value) })),
        );
      } catch (error) {
        if (attempt >= attempts) throw new Error(`GET ${url} failed: ${(error as Error).message}`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }

  /** Σ of the samples of `name`. */
  sum(name: string): number {
    return this.samples.reduce((total, s) => total + (s.name === name ? s.value : 0), 0);
  }

  /** Σ of the samples of `name` by the value of one of their labels. */
  byLabel(name: string, label: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const s of this.samples) {
      const value = s.name === name ? s.labels[label] : undefined;
      if (value !== undefined) out[value] = (out[value] ?? 0) + s.value;
    }
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
