import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku } from '../support/invariants.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

const ADMIN_TOKEN = 'test-admin-token-0123456789';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

describe('SKU administration', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN });
  });
  afterAll(() => svc.stop());

  it('creates a SKU with its stock spread evenly, first segments one more', async () => {
    const sku = uniqueSku('adm');
    const created = await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 4 }, admin);
    expect(created.status).toBe(201);
    expect(created.headers.get('location')).toBe(`/skus/${sku}`);
    expect(created.body).toEqual({
      sku,
      segments: 4,
      stock: 10,
      available: 10,
      reserved: 0,
      sold: 0,
      maxPerCustomer: null,
      saleStartsAt: null,
      saleEndsAt: null,
      onSale: true,
      lowStockThreshold: null,
      segmentStock: [
        { segment: 0, available: 3 },
        { segment: 1, available: 3 },
        { segment: 2, available: 2 },
        { segment: 3, available: 2 },
      ],
    });
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toEqual(created.body);
    const again = await call(svc.url, 'POST', '/skus', { sku, stock: 99, segments: 1 }, admin);
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('sku_exists');
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body.stock).toBe(10);
  });

  it('refuses admin routes without the token (401) or with a wrong one (401 invalid_token), changing nothing', async () => {
    const sku = uniqueSku('auth');
    const missing = await call(svc.url, 'POST', '/skus', { sku, stock: 1, segments: 1 });
    expect(missing.status).toBe(401);
    expect(missing.headers.get('www-authenticate')).toBe('Bearer');
    const wrong = await call(
      svc.url,
      'POST',
      '/skus',
      { sku, stock: 1, segments: 1 },
      { authorization: 'Bearer nope' },
    );
    expect(wrong.status).toBe(401);
    expect(wrong.body.code).toBe('invalid_token');
    expect(wrong.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).status).toBe(404);

    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 8, segments: 2 }, admin)).status).toBe(201);
    expect((await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 5 })).status).toBe(401);
    expect(
      (await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 4 }, { authorization: 'Bearer x' })).status,
    ).toBe(401);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ stock: 8, segments: 2 });
    // The order route is public but cannot touch configuration.
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1, segments: 9 })).status).toBe(400);
  });

  it('restocks: stock and available rise, spread over the segments', async () => {
    const sku = uniqueSku('rst');
    await call(svc.url, 'POST', '/skus', { sku, stock: 4, segments: 2 }, admin);
    const order = await call(svc.url, 'POST', '/orders', { sku, quantity: 2 });
    const restocked = await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 5 }, admin);
    expect(restocked.status).toBe(200);
    expect(restocked.body).toMatchObject({ stock: 9, available: 7, sold: 2 });
    // Each segment: its initial 2, less what the order took from it, plus its share of 5 (3 and 2).
    const expected = [2 + 3, 2 + 2];
    for (const d of order.body.deductions) expected[d.segment]! -= d.quantity;
    expect(restocked.body.segmentStock.map((s: { available: number }) => s.available)).toEqual(expected);
  });

  it('re-segments: the remaining stock is spread evenly over the new count, nothing lost or created', async () => {
    const sku = uniqueSku('seg');
    await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 3 }, admin);
    await call(svc.url, 'POST', '/orders', { sku, quantity: 7 });
    const resegmented = await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 8 }, admin);
    expect(resegmented.status).toBe(200);
    expect(resegmented.body).toMatchObject({ segments: 8, stock: 100, available: 93, sold: 7 });
    expect(resegmented.body.segmentStock.map((s: { available: number }) => s.available)).toEqual([
      12, 12, 12, 12, 12, 11, 11, 11,
    ]);
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(placed.status).toBe(201);
    expect(placed.body.deductions[0].segment).toBeLessThan(8);
  });

  it('conserves stock when re-segmenting and restocking while orders run', async () => {
    const sku = uniqueSku('live');
    await call(svc.url, 'POST', '/skus', { sku, stock: 300, segments: 4 }, admin);
    let stop = false;
    const sold: number[] = [];
    const statuses = new Map<number, number>();
    const buyer = async () => {
      while (!stop) {
        const answer = await call(svc.url, 'POST', '/orders', { sku, quantity: 2 });
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        if (answer.status === 201) sold.push(answer.body.quantity);
      }
    };
    const buyers = Array.from({ length: 16 }, buyer);
    const changes: number[] = [];
    for (const segments of [7, 2, 16, 1, 5]) {
      changes.push((await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments }, admin)).status);
      changes.push((await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 25 }, admin)).status);
    }
    stop = true;
    await Promise.all(buyers);

    // Orders were placed while the changes ran: otherwise nothing below would be tested.
    expect(sold.length).toBeGreaterThan(0);
    expect(changes.every((s) => s === 200)).toBe(true);
    // A configuration change holds every segment lock for a moment; on a loaded machine an order may run out of its
    // wait budget meanwhile (503 lock_busy, nothing deducted). Anything else would be a fault.
    expect(
      [...statuses.keys()].every((s) => [201, 409, 503].includes(s)),
      JSON.stringify([...statuses]),
    ).toBe(true);
    expect(statuses.get(503) ?? 0).toBeLessThan(0.05 * sold.length + 5);
    const audit = await auditSku(svc.service.db, sku);
    const totalSold = sold.reduce((a, b) => a + b, 0);
    expect(audit.totalStock).toBe(300 + 5 * 25);
    expect(audit.sold).toBe(totalSold);
    // The view's running totals survived five re-segmentations: they still agree with the ledger, and the view says so.
    expect(audit.soldCounted).toBe(totalSold);
    expect(audit.available + audit.sold).toBe(audit.totalStock);
    expect(audit.negativeSegments).toBe(0);
    expect(audit.ordersLedgerMismatch).toBe(0);
    const view = await call(svc.url, 'GET', `/skus/${sku}`);
    expect(view.body.sold).toBe(totalSold);
    expect(view.body.segments).toBe(5);
    expect(view.body.segmentStock).toHaveLength(5);
  });
});
