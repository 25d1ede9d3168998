import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchRoutes } from '../../loadtest/bench/bench.routes.js';
import { auditSku } from '../support/invariants.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

const benchRequests = [
  ['POST', '/bench/echo'],
  ['POST', '/bench/oversell/none'],
  ['POST', '/bench/oversell/local-mutex'],
  ['POST', '/bench/oversell/redis-lock'],
  ['POST', '/bench/lock-free/pg-conditional'],
  ['POST', '/bench/lock-free/redis-counter'],
] as const;

describe('benchmark routes', () => {
  let plain: RunningService;
  let bench: RunningService;
  let sku: string;
  beforeAll(async () => {
    plain = await startService();
    bench = await startService({}, { routes: benchRoutes });
    sku = uniqueSku('bench');
    expect((await call(plain.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
  });
  afterAll(async () => {
    await plain.stop();
    await bench.stop();
  });

  it('do not exist in the product (only the load test mounts them): 404, and nothing sold', async () => {
    for (const [method, path] of benchRequests) {
      const answer = await call(plain.url, method, path, { sku, quantity: 1 });
      expect(answer.status, path).toBe(404);
      expect(answer.body.code, path).toBe('route_not_found');
    }
    expect(await auditSku(plain.service.db, sku)).toMatchObject({ available: 10, sold: 0 });
  });

  it('when enabled, sell through every mode and keep the books of the locked and lock-free ones', async () => {
    expect((await call(bench.url, 'POST', '/bench/echo', { sku, quantity: 1 })).body).toEqual({
      echo: { sku, quantity: 1 },
    });
    for (const [, path] of benchRequests.slice(1)) {
      const answer = await call(bench.url, 'POST', path, { sku, quantity: 1 });
      expect(answer.status, path).toBe(201);
      expect(answer.body).toMatchObject({ sku, quantity: 1 });
    }
    // Four sales from the segment; the Redis counter baseline keeps its stock in Redis, seeded from the 6 left then.
    const audit = await auditSku(bench.service.db, sku);
    expect(audit).toMatchObject({
      sold: 5,
      available: 6,
      negativeSegments: 0,
      ordersWithoutLedger: 0,
      ordersLedgerMismatch: 0,
    });
    expect((await call(bench.url, 'GET', `/bench/lock-free/redis-counter/${sku}`)).body).toEqual({ sku, available: 5 });
    expect((await call(bench.url, 'POST', '/bench/oversell/sideways', { sku, quantity: 1 })).status).toBe(400);
  });

  it('refuse the unlocked modes without the admin token when one is set', async () => {
    const guarded = await startService({ ADMIN_TOKEN: 'a-long-enough-admin-token' }, { routes: benchRoutes });
    try {
      expect((await call(guarded.url, 'POST', '/bench/oversell/none', { sku, quantity: 1 })).status).toBe(401);
      expect((await call(guarded.url, 'POST', '/bench/lock-free/pg-conditional', { sku, quantity: 1 })).status).toBe(
        401,
      );
      expect((await call(guarded.url, 'POST', '/bench/echo', { sku, quantity: 1 })).status).toBe(200);
    } finally {
      await guarded.stop();
    }
  });
});
