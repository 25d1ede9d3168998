import type { SkuView } from '../../src/inventory/stock-admin.js';

/** The service's HTTP API, as much of it as the load test needs. */
export class StockApi {
  constructor(
    readonly baseUrl: string,
    private readonly adminToken: string | undefined,
  ) {}

  /** Headers an admin route needs (and the benchmark routes, when the service has a token). */
  get adminHeaders(): Record<string, string> {
    return this.adminToken ? { authorization: `Bearer ${this.adminToken}` } : {};
  }

  /** `settings`: more of the SKU's fields (a sale window, a limit). */
  createSku(sku: string, stock: number, segments: number, settings: Record<string, unknown> = {}): Promise<SkuView> {
    return this.expect(201, 'POST', '/skus', { sku, stock, segments, ...settings });
  }

  updateSku(sku: string, changes: Record<string, unknown>): Promise<SkuView> {
    return this.expect(200, 'PATCH', `/skus/${encodeURIComponent(sku)}`, changes);
  }

  sku(sku: string): Promise<SkuView> {
    return this.expect(200, 'GET', `/skus/${encodeURIComponent(sku)}`);
  }

  restock(sku: string, quantity: number): Promise<SkuView> {
    return this.expect(200, 'POST', `/skus/${encodeURIComponent(sku)}/restock`, { quantity });
  }

  /** The lock-free Redis baseline's stock counter; null before its first sale. */
  async redisCounter(sku: string): Promise<number | null> {
    const path = `/bench/lock-free/redis-counter/${encodeURIComponent(sku)}`;
    return (await this.expect<{ available: number | null }>(200, 'GET', path)).available;
  }

  async order(sku: string, quantity: number): Promise<{ status: number; text: string }> {
    const response = await this.send('POST', '/orders', { sku, quantity });
    return { status: response.status, text: await response.text() };
  }

  private send(method: string, path: string, body?: unknown): Promise<Response> {
    const json: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' };
    return fetch(this.baseUrl + path, {
      method,
      headers: { ...json, ...this.adminHeaders },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  private async expect<T = SkuView>(status: number, method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body);
    const text = await response.text();
    if (response.status !== status)
      throw new Error(`${method} ${path}: expected ${status}, got ${response.status}: ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  }
}
