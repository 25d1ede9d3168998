import type { SkuView } from '../../src/inventory/stock-admin.js';

/** The service's HTTP API, as much of it as the load test needs. */

export type { SkuView };

export interface ApiAnswer<T = unknown> {
  status: number;
  body: T;
}

export class StockApi {
  constructor(
    readonly baseUrl: string,
    private readonly adminToken: string | undefined,
  ) {}

  /** Headers an admin route needs (and the benchmark routes, when the service has a token). */
  get adminHeaders(): Record<string, string> {
    return this.adminToken ? { authorization: `Bearer ${this.adminToken}` } : {};
  }

  async createSku(sku: string, stock: number, segments: number): Promise<SkuView> {
    return this.expect(201, await this.call<SkuView>('POST', '/skus', { sku, stock, segments }, this.adminHeaders));
  }

  async sku(sku: string): Promise<SkuView> {
    return this.expect(200, await this.call<SkuView>('GET', `/skus/${encodeURIComponent(sku)}`));
  }

  async restock(sku: string, quantity: number): Promise<SkuView> {
    const path = `/skus/${encodeURIComponent(sku)}/restock`;
    return this.expect(200, await this.call<SkuView>('POST', path, { quantity }, this.adminHeaders));
  }

  order(sku: string, quantity: number): Promise<ApiAnswer> {
    return this.call('POST', '/orders', { sku, quantity });
  }

  /** The lock-free Redis baseline's stock counter; null before its first sale. */
  async redisCounter(sku: string): Promise<number | null> {
    const path = `/bench/lock-free/redis-counter/${encodeURIComponent(sku)}`;
    return this.expect(200, await this.call<{ available: number | null }>('GET', path, undefined, this.adminHeaders))
      .available;
  }

  async call<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<ApiAnswer<T>> {
    const response = await fetch(this.baseUrl + path, {
      method,
      headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: keep the text for the error message.
    }
    return { status: response.status, body: parsed as T };
  }

  private expect<T>(status: number, answer: ApiAnswer<T>): T {
    if (answer.status !== status) {
      throw new Error(`expected ${status}, got ${answer.status}: ${JSON.stringify(answer.body).slice(0, 300)}`);
    }
    return answer.body;
  }
}
