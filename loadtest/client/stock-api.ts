import { setTimeout as sleep } from 'node:timers/promises';
import type { SkuView } from '../../src/stock/sku-view.js';
import { call } from '../../test/support/service.js';
import type { ServiceTarget } from '../infra/service-process.js';

const skuPath = (sku: string) => `/skus/${encodeURIComponent(sku)}`;
const excerpt = (body: unknown) => JSON.stringify(body)?.slice(0, 300);

/** The service's HTTP API, as much of it as the load test needs. */
export class StockApi {
  constructor(private readonly service: Pick<ServiceTarget, 'url' | 'adminToken'>) {}

  /** Headers an admin route needs (and the benchmark routes, when the service has a token). */
  get adminHeaders(): Record<string, string> {
    return this.service.adminToken ? { authorization: `Bearer ${this.service.adminToken}` } : {};
  }

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
  order = async (sku: string, quantity: number) => (await this.send('POST', '/orders', { sku, quantity })).status;

  /** Confirms a reservation; a 503 (the service shedding load a moment) is retried as a client would, four times. */
  async confirm(orderId: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const { status, body } = await this.send('POST', `/orders/${orderId}/confirm`);
      if (status === 200) return;
      if (status !== 503 || attempt === 5)
        throw new Error(`confirming order ${orderId}: got ${status}: ${excerpt(body)}`);
      await sleep(250 * attempt);
    }
  }

  /** A request that must answer `status`; answers the JSON body. */
  async call<T = SkuView>(status: number, method: string, path: string, body?: unknown): Promise<T> {
    const answer = await this.send(method, path, body);
    if (answer.status !== status)
      throw new Error(`${method} ${path}: expected ${status}, got ${answer.status}: ${excerpt(answer.body)}`);
    return answer.body as T;
  }

  private send = (method: string, path: string, body?: unknown) =>
    call(this.service.url, method, path, body, this.adminHeaders);
}
