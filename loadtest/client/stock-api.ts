import { setTimeout as sleep } from 'node:timers/promises';
import type { SkuView } from '../../src/stock/sku-view.js';

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

  /** Confirms a reservation; a 503 (the service shedding load a moment) is retried as a client would, four times. */
  async confirm(orderId: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const response = await this.send('POST', `/orders/${orderId}/confirm`);
      const text = await response.text();
      if (response.status === 200) return;
      if (response.status !== 503 || attempt === 5)
        throw new Error(`confirming order ${orderId}: got ${response.status}: ${text.slice(0, 300)}`);
      await sleep(250 * attempt);
    }
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
