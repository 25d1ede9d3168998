import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku } from '../support/invariants.js';
import { MetricsSnapshot } from '../support/scrape-metric.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

describe('placing orders', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  beforeAll(async () => {
    // The counters are the instance's, so it must see this file's orders only: on the shared database it would also
    // admit tickets of waiting lines earlier test files left open.
    own = await createOwnDatabase('orders');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startService({ DATABASE_URL: own.url });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  const createSku = async (stock: number, segments: number) => {
    const sku = uniqueSku('ord');
    const created = await call(svc.url, 'POST', '/skus', { sku, stock, segments });
    expect(created.status).toBe(201);
    return sku;
  };

  it('deducts from one segment and records the order with its ledger', async () => {
    const sku = await createSku(100, 4);
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 3 });
    expect(placed.status).toBe(201);
    expect(placed.headers.get('location')).toBe(`/orders/${placed.body.orderId}`);
    expect(placed.body).toMatchObject({ sku, quantity: 3 });
    expect(placed.body.deductions).toHaveLength(1);
    expect(placed.body.deductions[0].quantity).toBe(3);

    const fetched = await call(svc.url, 'GET', `/orders/${placed.body.orderId}`);
    expect(fetched.status).toBe(200);
    expect(fetched.body).toEqual(placed.body);

    const view = await call(svc.url, 'GET', `/skus/${sku}`);
    expect(view.body).toMatchObject({ stock: 100, available: 97, sold: 3, segments: 4 });
    const segment = placed.body.deductions[0].segment;
    expect(view.body.segmentStock[segment].available).toBe(22);
  });

  it('gives orders time-ordered ids (UUIDv7): a later order sorts after an earlier one', async () => {
    const sku = await createSku(10, 1);
    const first = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    const v7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(first.body.orderId).toMatch(v7);
    expect(second.body.orderId).toMatch(v7);
    expect(first.body.orderId < second.body.orderId).toBe(true);
    // The first 48 bits are the time the order was placed, in milliseconds.
    const placedAt = Number.parseInt(first.body.orderId.replace('-', '').slice(0, 12), 16);
    expect(Math.abs(placedAt - Date.parse(first.body.createdAt))).toBeLessThan(60_000);
  });

  it('covers an order from several segments when no single one has enough', async () => {
    const sku = await createSku(12, 4); // 3 per segment
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 7 });
    expect(placed.status).toBe(201);
    const taken = placed.body.deductions.map((d: { quantity: number }) => d.quantity);
    expect(taken.reduce((a: number, b: number) => a + b, 0)).toBe(7);
    const segments = placed.body.deductions.map((d: { segment: number }) => d.segment);
    expect(segments).toEqual([...segments].sort((a, b) => a - b));
    expect((await auditSku(svc.service.db, sku)).available).toBe(5);
  });

  it('covers an order larger than every segment at its first try on a SKU of a thousand one-unit segments', async () => {
    // The segments' stock as loaded with the SKU tells planning at once that no single segment holds 3 units; guessing
    // one unknown segment per round trip ran out of the wait budget (503 lock_busy) before it found out.
    const sku = await createSku(1000, 1000);
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 3 });
    expect(placed.status, JSON.stringify(placed.body)).toBe(201);
    expect(placed.body.deductions).toHaveLength(3);
    expect((await auditSku(svc.service.db, sku)).available).toBe(997);
  });

  it('sells every unit before saying sold out: 40 units over 20 segments, orders of 5', async () => {
    const sku = await createSku(40, 20); // 2 units per segment: every order of 5 spans segments
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push((await call(svc.url, 'POST', '/orders', { sku, quantity: 5 })).status);
    expect(statuses.slice(0, 8)).toEqual(Array(8).fill(201));
    expect(statuses.slice(8)).toEqual([409, 409]);
    const audit = await auditSku(svc.service.db, sku);
    expect(audit).toMatchObject({ available: 0, sold: 40, negativeSegments: 0, ordersWithoutLedger: 0 });
  });

  it('refuses an order larger than the stock with the stock it saw, and changes nothing', async () => {
    const sku = await createSku(9, 3);
    const refused = await call(svc.url, 'POST', '/orders', { sku, quantity: 10 });
    expect(refused.status).toBe(409);
    expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(refused.body).toMatchObject({ code: 'out_of_stock', status: 409, available: 9 });
    expect((await auditSku(svc.service.db, sku)).available).toBe(9);
  });

  it('answers sold-out orders at once once every segment is known empty, with no lock and no query, and reopens on restock', async () => {
    const sku = await createSku(4, 2);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 4 })).status).toBe(201);
    const before = await MetricsSnapshot.scrape(`${svc.url}/metrics`);
    for (let i = 0; i < 3; i++) {
      const refused = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
      expect(refused.status).toBe(409);
      expect(refused.body.available).toBe(0);
    }
    const after = await MetricsSnapshot.scrape(`${svc.url}/metrics`);
    const moved = (name: string) => after.sum(name) - before.sum(name);
    // The counters saw these three orders (refused as out of stock)…
    expect(
      after.byLabel('stock_orders_total', 'outcome').out_of_stock! -
        (before.byLabel('stock_orders_total', 'outcome').out_of_stock ?? 0),
    ).toBe(3);
    // …and none of them tried a segment lock, read a segment or wrote a batch.
    expect({
      lockAttempts: moved('stock_lock_attempts_total'),
      lockAcquisitions: moved('stock_lock_acquisitions_total'),
      segmentReads: moved('stock_segment_reads_total'),
      batches: moved('stock_batch_orders_count'),
    }).toEqual({ lockAttempts: 0, lockAcquisitions: 0, segmentReads: 0, batches: 0 });
    expect((await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 2 })).status).toBe(200);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 2 })).status).toBe(201);
    // The restocked order went through the locks again.
    const reopened = await MetricsSnapshot.scrape(`${svc.url}/metrics`);
    expect(reopened.sum('stock_lock_acquisitions_total')).toBeGreaterThan(after.sum('stock_lock_acquisitions_total'));
  });

  it('keeps exact books when two instances take turns on one segment (remembered state never outlives a turn)', async () => {
    const other = await startService({ DATABASE_URL: own.url });
    try {
      const sku = await createSku(50, 1);
      const sequence = [svc, svc, other, svc, other, other, svc, other, svc];
      for (const [i, instance] of sequence.entries()) {
        const placed = await call(instance.url, 'POST', '/orders', { sku, quantity: i + 1 });
        expect(placed.status).toBe(201);
      }
      const audit = await auditSku(svc.service.db, sku);
      expect(audit).toMatchObject({ sold: 45, available: 5, ordersLedgerMismatch: 0 });
      const last = await call(other.url, 'POST', '/orders', { sku, quantity: 6 });
      expect(last.body).toMatchObject({ code: 'out_of_stock', available: 5 });
    } finally {
      await other.stop();
    }
  });

  it('answers 404 for an unknown SKU and an unknown order', async () => {
    const missing = await call(svc.url, 'POST', '/orders', { sku: uniqueSku('nope'), quantity: 1 });
    expect(missing.status).toBe(404);
    expect(missing.body.code).toBe('sku_not_found');
    const noOrder = await call(svc.url, 'GET', '/orders/00000000-0000-4000-8000-000000000000');
    expect(noOrder.status).toBe(404);
    expect(noOrder.body.code).toBe('order_not_found');
  });

  it('sells exactly the stock to concurrent orders in one process, with a ledger row for every success', async () => {
    const sku = await createSku(150, 8);
    const answers = await Promise.all(
      Array.from({ length: 120 }, (_, i) => call(svc.url, 'POST', '/orders', { sku, quantity: (i % 3) + 1 })),
    );
    const sold = answers.filter((a) => a.status === 201).reduce((total, a) => total + a.body.quantity, 0);
    expect(answers.every((a) => [201, 409].includes(a.status))).toBe(true);
    const audit = await auditSku(svc.service.db, sku);
    expect(audit.sold).toBe(sold);
    expect(audit.available + audit.sold).toBe(150);
    expect(audit.ordersLedgerMismatch).toBe(0);
    // Demand (240) exceeds supply, so some order was refused, having seen less than its quantity (≤ 3) under locks;
    // stock only shrinks after that: less than 3 can be left, never a false sold-out with plenty remaining.
    expect(audit.available).toBeLessThan(3);
  });
});
