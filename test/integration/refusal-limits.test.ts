import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

/**
 * A number out of range is refused with the bound of its own field, however far out it is: a client that sends
 * 1e308 learns the limit it can use, not the range of safe integers.
 */
describe('refusals of numbers name the limit that applies', () => {
  let svc: RunningService;
  let sku: string;
  beforeAll(async () => {
    svc = await startService();
    sku = uniqueSku('limits');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 2 })).status).toBe(201);
  });
  afterAll(() => svc?.stop());

  const cases: { name: string; method: string; path: () => string; body: (n: number) => unknown; bounds: string[] }[] =
    [
      {
        name: 'order quantity',
        method: 'POST',
        path: () => '/orders',
        body: (n) => ({ sku, quantity: n }),
        bounds: ['quantity: Too small: expected number to be >=1', 'quantity: Too big: expected number to be <=1000'],
      },
      {
        name: 'cart line quantity',
        method: 'POST',
        path: () => '/orders',
        body: (n) => ({ items: [{ sku, quantity: n }] }),
        bounds: [
          'items.0.quantity: Too small: expected number to be >=1',
          'items.0.quantity: Too big: expected number to be <=1000',
        ],
      },
      {
        name: 'holdSeconds',
        method: 'POST',
        path: () => '/orders',
        body: (n) => ({ sku, quantity: 1, holdSeconds: n }),
        bounds: [
          'holdSeconds: Too small: expected number to be >=1',
          'holdSeconds: Too big: expected number to be <=86400',
        ],
      },
      {
        name: 'stock',
        method: 'POST',
        path: () => '/skus',
        body: (n) => ({ sku: uniqueSku('limits'), stock: n, segments: 1 }),
        bounds: [
          'stock: Too small: expected number to be >=0',
          'stock: Too big: expected number to be <=1000000000000',
        ],
      },
      {
        name: 'segments',
        method: 'PUT',
        path: () => `/skus/${sku}/segments`,
        body: (n) => ({ segments: n }),
        bounds: ['segments: Too small: expected number to be >=1', 'segments: Too big: expected number to be <=1024'],
      },
      {
        name: 'restock quantity',
        method: 'POST',
        path: () => `/skus/${sku}/restock`,
        body: (n) => ({ quantity: n }),
        bounds: [
          'quantity: Too small: expected number to be >=1',
          'quantity: Too big: expected number to be <=1000000000000',
        ],
      },
      {
        name: 'maxPerCustomer',
        method: 'PATCH',
        path: () => `/skus/${sku}`,
        body: (n) => ({ maxPerCustomer: n }),
        bounds: [
          'maxPerCustomer: Too small: expected number to be >=1',
          'maxPerCustomer: Too big: expected number to be <=1000000',
        ],
      },
      {
        name: 'lowStockThreshold',
        method: 'PATCH',
        path: () => `/skus/${sku}`,
        body: (n) => ({ lowStockThreshold: n }),
        bounds: [
          'lowStockThreshold: Too small: expected number to be >=0',
          'lowStockThreshold: Too big: expected number to be <=1000000000000',
        ],
      },
    ];

  for (const { name, method, path, body, bounds } of cases) {
    it(name, async () => {
      for (const [n, bound] of [
        [-1e308, bounds[0]],
        [-(2 ** 60), bounds[0]],
        [2 ** 60, bounds[1]],
        [1e308, bounds[1]],
      ] as const) {
        const answer = await call(svc.url, method, path(), body(n));
        expect(answer.status, JSON.stringify(answer.body)).toBe(400);
        expect(answer.body.detail, String(n)).toBe(bound);
      }
      // Inside the bounds, a fraction is refused as one.
      const fraction = await call(svc.url, method, path(), body(1.5));
      expect(fraction.body.detail).toMatch(/: Invalid input: expected int, received number$/);
    });
  }

  it('limit of a query', async () => {
    for (const route of ['/skus', '/events', '/orders?customerId=alice&']) {
      const answer = await call(svc.url, 'GET', `${route}${route.endsWith('&') ? '' : '?'}limit=1e308`);
      expect(answer.status).toBe(400);
      expect(answer.body.detail).toMatch(/^limit: Too big: expected number to be <=\d{3,4}$/);
    }
  });
});

describe('order replays', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc?.stop());

  it('carry Idempotent-Replayed: true, as admin replays do, and only replays do', async () => {
    const sku = uniqueSku('replay');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 2 })).status).toBe(201);
    const key = { 'idempotency-key': uniqueSku('key') };
    const first = await call(svc.url, 'POST', '/orders', { sku, quantity: 2 }, key);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await call(svc.url, 'POST', '/orders', { sku, quantity: 2 }, key);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });
});
