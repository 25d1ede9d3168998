import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { statusCounts } from '../support/order-load.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/** Reservations, confirm and cancel, expiry, per-customer limits and carts, across two real service processes. */
describe('order lifecycle', () => {
  let db: Db;
  let instances: ServiceProcess[];
  let urls: string[];
  const post = (i: number, path: string, body?: unknown, headers?: Record<string, string>) =>
    call(urls[i % urls.length]!, 'POST', path, body, headers);
  const createSku = async (stock: number, segments: number, extra: object = {}) => {
    const sku = uniqueSku('life');
    expect((await post(0, '/skus', { sku, stock, segments, ...extra })).status).toBe(201);
    return sku;
  };
  const view = async (sku: string) => (await call(urls[1]!, 'GET', `/skus/${sku}`)).body;
  /** Units on each of the SKU's confirmation counter rows. */
  const confirmationCounters = async (sku: string) =>
    (
      await db
        .selectFrom('reservation_confirmations')
        .innerJoin('skus', 'skus.id', 'reservation_confirmations.sku_id')
        .where('skus.sku', '=', sku)
        .select(['reservation_confirmations.units'])
        .execute()
    ).map((c) => c.units);

  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    // A generous wait budget: on this 2-core machine a 503 would only blur the counts.
    instances = await Promise.all([1, 2].map(() => ServiceProcess.spawn({ LOCK_WAIT_MS: '15000' })));
    urls = instances.map((i) => i.url);
  });
  afterAll(async () => {
    await Promise.all((instances ?? []).map((i) => i.stop()));
    await db?.destroy();
  });

  it('reserves, confirms and cancels, each transition answered again without effect', async () => {
    const sku = await createSku(10, 2);
    const reserved = await post(0, '/orders', { sku, quantity: 3, holdSeconds: 600, customerId: 'ann' });
    expect(reserved.status).toBe(201);
    const order = reserved.body;
    expect(order).toMatchObject({ status: 'reserved', sku, quantity: 3, customerId: 'ann' });
    expect(order.items).toEqual([{ sku, quantity: 3, deductions: order.deductions }]);
    expect(Date.parse(order.expiresAt) - Date.parse(order.createdAt)).toBe(600_000);
    expect(await view(sku)).toMatchObject({ stock: 10, available: 7, reserved: 3, sold: 0 });

    const confirmed = await post(1, `/orders/${order.orderId}/confirm`);
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.status).toBe('confirmed');
    expect(confirmed.body.expiresAt).toBeUndefined();
    expect((await post(0, `/orders/${order.orderId}/confirm`)).status).toBe(200);
    expect(await view(sku)).toMatchObject({ available: 7, reserved: 0, sold: 3 });
    // The confirm counted its units apart, on one of the SKU's counter rows: the segment rows that every lock holder
    // writes were left alone (their running totals still count the units as reserved).
    const segmentTotals = await db
      .selectFrom('stock_segments')
      .innerJoin('skus', 'skus.id', 'stock_segments.sku_id')
      .where('skus.sku', '=', sku)
      .select((eb) => [
        eb.fn.sum<string>('stock_segments.reserved').as('reserved'),
        eb.fn.sum<string>('stock_segments.sold').as('sold'),
      ])
      .executeTakeFirstOrThrow();
    expect(segmentTotals).toEqual({ reserved: '3', sold: '0' });
    expect(await confirmationCounters(sku)).toEqual([3]);

    const cancelled = await post(0, `/orders/${order.orderId}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    const again = await post(1, `/orders/${order.orderId}/cancel`);
    expect(again.status).toBe(200);
    expect(again.body.status).toBe('cancelled');
    expect(await view(sku)).toMatchObject({ available: 10, reserved: 0, sold: 0 });
    const refused = await post(1, `/orders/${order.orderId}/confirm`);
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('order_not_reserved');
    expect((await call(urls[0]!, 'GET', `/orders/${order.orderId}`)).body.status).toBe('cancelled');

    // A plain order is confirmed at once; cancelling it returns its units too.
    const direct = await post(1, '/orders', { sku, quantity: 4 });
    expect(direct.body.status).toBe('confirmed');
    expect((await post(0, `/orders/${direct.body.orderId}/cancel`)).body.status).toBe('cancelled');
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit).toMatchObject({ available: 10, returned: 7, ended: 7 });
    expect(await confirmationCounters(sku)).toEqual([0]);
    expect((await post(0, '/orders/00000000-0000-4000-8000-000000000000/cancel')).status).toBe(404);
  });

  it('expires reservations within 2 s of expiresAt, once, with two instances sweeping', async () => {
    const sku = await createSku(40, 4);
    const placed = await Promise.all(
      Array.from({ length: 20 }, (_, i) => post(i, '/orders', { sku, quantity: 2, holdSeconds: 1 })),
    );
    expect(statusCounts(placed)).toEqual({ 201: 20 });
    expect(await view(sku)).toMatchObject({ available: 0, reserved: 40 });
    const lastExpiry = Math.max(...placed.map((p) => Date.parse(p.body.expiresAt)));

    const tookMs = await waitFor(async () => (await view(sku)).available === 40, 10_000);
    expect(tookMs).toBeLessThan(10_000);
    // Both times come from the database's clock: the returns were written within 2 s of the last hold running out.
    const expiredAt = await db
      .selectFrom('stock_returns')
      .select((eb) => eb.fn.max('created_at').as('last'))
      .where(
        'order_id',
        'in',
        placed.map((p) => p.body.orderId),
      )
      .executeTakeFirstOrThrow();
    expect(new Date(expiredAt.last as unknown as string).getTime() - lastExpiry).toBeLessThan(2_000);

    for (const { body } of placed) {
      const order = (await call(urls[0]!, 'GET', `/orders/${body.orderId}`)).body;
      expect(order.status).toBe('expired');
      const confirm = await post(1, `/orders/${body.orderId}/confirm`);
      expect(confirm.status).toBe(409);
      expect(confirm.body.code).toBe('order_not_reserved');
      const cancel = await post(0, `/orders/${body.orderId}/cancel`);
      expect(cancel.status).toBe(200);
      expect(cancel.body.status).toBe('expired');
    }
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit).toMatchObject({ available: 40, reserved: 0, sold: 0, returned: 40, ended: 40 });
  });

  it('confirms many reservations at once on two instances, racing cancels, each counted once', async () => {
    const [a, b] = [await createSku(200, 4), await createSku(200, 4)];
    // Carts over both SKUs, half of them listing the SKUs the other way round: batches lock counters in one order.
    const placed = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        post(i, '/orders', {
          items:
            i % 2
              ? [
                  { sku: a, quantity: 1 },
                  { sku: b, quantity: 2 },
                ]
              : [
                  { sku: b, quantity: 2 },
                  { sku: a, quantity: 1 },
                ],
          holdSeconds: 600,
        }),
      ),
    );
    expect(statusCounts(placed)).toEqual({ 201: 60 });
    const ids = placed.map((p) => p.body.orderId as string);
    const cancelled = new Set(ids.filter((_, i) => i % 6 === 0));
    // Every order confirmed on both instances at once, a tenth or so cancelled meanwhile.
    const answers = await Promise.all([
      ...ids.flatMap((id) => [post(0, `/orders/${id}/confirm`), post(1, `/orders/${id}/confirm`)]),
      ...[...cancelled].map((id, i) => post(i, `/orders/${id}/cancel`)),
    ]);
    expect(answers.filter((r) => r.status !== 200 && r.body.code !== 'order_not_reserved')).toEqual([]);
    const final = await Promise.all(ids.map(async (id) => (await call(urls[0]!, 'GET', `/orders/${id}`)).body.status));
    const confirmedCount = final.filter((status) => status === 'confirmed').length;
    expect(final.filter((status) => status === 'cancelled').length).toBe(cancelled.size);
    expect(confirmedCount).toBe(60 - cancelled.size);
    expect(await view(a)).toMatchObject({ available: 200 - confirmedCount, reserved: 0, sold: confirmedCount });
    expect(await view(b)).toMatchObject({ available: 200 - 2 * confirmedCount, reserved: 0, sold: 2 * confirmedCount });
    for (const sku of [a, b]) expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('gives a confirm that races the expiry exactly one winner', async () => {
    const sku = await createSku(30, 3);
    const placed = await Promise.all(
      Array.from({ length: 30 }, (_, i) => post(i, '/orders', { sku, quantity: 1, holdSeconds: 1 })),
    );
    expect(statusCounts(placed)).toEqual({ 201: 30 });
    // Confirms sent around the moment the holds run out: some win, the rest find their order expiring or expired.
    const due = Date.parse(placed[0]!.body.expiresAt);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - Date.now() - 150)));
    const confirms = await Promise.all(placed.map((p, i) => post(i, `/orders/${p.body.orderId}/confirm`)));
    expect(Object.keys(statusCounts(confirms)).every((s) => s === '200' || s === '409')).toBe(true);
    await waitFor(async () => (await view(sku)).reserved === 0, 10_000);
    for (const [i, p] of placed.entries()) {
      const final = (await call(urls[0]!, 'GET', `/orders/${p.body.orderId}`)).body.status;
      expect(final).toBe(confirms[i]!.status === 200 ? 'confirmed' : 'expired');
    }
    const won = confirms.filter((c) => c.status === 200).length;
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit).toMatchObject({ sold: won, reserved: 0, available: 30 - won, returned: 30 - won });
  });

  it('makes a segment that was sold out a candidate again on every instance once units come back', async () => {
    const sku = await createSku(2, 1);
    const order = await post(0, '/orders', { sku, quantity: 2, holdSeconds: 600 });
    expect(order.status).toBe(201);
    // Both instances learn the segment is empty.
    for (const i of [0, 1]) expect((await post(i, '/orders', { sku, quantity: 1 })).status).toBe(409);
    expect((await post(1, `/orders/${order.body.orderId}/cancel`)).status).toBe(200);
    for (const i of [0, 1]) expect((await post(i, '/orders', { sku, quantity: 1 })).status).toBe(201);
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('returns the units of a layout that was replaced over the current one', async () => {
    const sku = await createSku(12, 3);
    const order = (await post(0, '/orders', { sku, quantity: 6, holdSeconds: 600 })).body;
    expect((await call(urls[0]!, 'PUT', `/skus/${sku}/segments`, { segments: 2 })).status).toBe(200);
    expect(await view(sku)).toMatchObject({ segments: 2, available: 6, reserved: 6 });
    expect((await post(1, `/orders/${order.orderId}/cancel`)).body.status).toBe('cancelled');
    const after = await view(sku);
    expect(after).toMatchObject({ available: 12, reserved: 0, sold: 0 });
    expect(after.segmentStock).toEqual([
      { segment: 0, available: 6 },
      { segment: 1, available: 6 },
    ]);
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);

    // Confirmed, then re-segmented: sold stays sold, and a cancel still returns every unit once.
    const kept = (await post(0, '/orders', { sku, quantity: 5, holdSeconds: 600 })).body;
    expect((await post(1, `/orders/${kept.orderId}/confirm`)).status).toBe(200);
    expect((await call(urls[1]!, 'PUT', `/skus/${sku}/segments`, { segments: 3 })).status).toBe(200);
    expect(await view(sku)).toMatchObject({ segments: 3, available: 7, reserved: 0, sold: 5 });
    expect((await post(0, `/orders/${kept.orderId}/cancel`)).body.status).toBe('cancelled');
    expect(await view(sku)).toMatchObject({ available: 12, reserved: 0, sold: 0 });
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('holds a customer to the limit, frees units on cancel, and counts earlier orders towards a new limit', async () => {
    const sku = await createSku(100, 4, { maxPerCustomer: 2 });
    const anonymous = await post(0, '/orders', { sku, quantity: 1 });
    expect(anonymous.status).toBe(400);
    expect(anonymous.body.code).toBe('customer_required');

    // Concurrent orders of one customer across instances: test/integration/cross-process.test.ts.
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await post(i, '/orders', { sku, quantity: 1, customerId: 'hammer' }));
    expect(answers.map((a) => a.status)).toEqual([201, 201, 409]);
    expect(answers[2]!.body).toMatchObject({ code: 'purchase_limit', sku, remaining: 0 });
    const other = await post(1, '/orders', { sku, quantity: 2, customerId: 'someone-else', holdSeconds: 60 });
    expect(other.status).toBe(201);
    const tooMany = await post(0, '/orders', { sku, quantity: 3, customerId: 'new' });
    expect(tooMany.body).toMatchObject({ code: 'purchase_limit', remaining: 2 });

    const mine = answers.find((a) => a.status === 201)!.body;
    expect((await post(1, `/orders/${mine.orderId}/cancel`)).status).toBe(200);
    expect((await post(0, '/orders', { sku, quantity: 1, customerId: 'hammer' })).status).toBe(201);
    expect((await post(1, '/orders', { sku, quantity: 1, customerId: 'hammer' })).body.code).toBe('purchase_limit');

    // Lifting the limit lets anyone order; setting a lower one counts the orders already placed.
    const lifted = await call(urls[0]!, 'PATCH', `/skus/${sku}`, { maxPerCustomer: null });
    expect(lifted.status).toBe(200);
    expect(lifted.body.maxPerCustomer).toBeNull();
    expect((await post(1, '/orders', { sku, quantity: 1 })).status).toBe(201);
    expect((await post(0, '/orders', { sku, quantity: 1, customerId: 'hammer' })).status).toBe(201);
    expect((await call(urls[1]!, 'PATCH', `/skus/${sku}`, { maxPerCustomer: 3 })).body.maxPerCustomer).toBe(3);
    expect((await post(0, '/orders', { sku, quantity: 1, customerId: 'hammer' })).body).toMatchObject({
      code: 'purchase_limit',
      remaining: 0,
    });
    expect((await post(1, '/orders', { sku, quantity: 1, customerId: 'someone-else' })).status).toBe(201);
    expect((await call(urls[0]!, 'PATCH', `/skus/${sku}`, { maxPerCustomer: 0 })).status).toBe(400);
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('places a cart all or nothing, naming the SKU that fell short', async () => {
    const [a, b] = [await createSku(10, 2), await createSku(3, 3)];
    const cart = await post(0, '/orders', {
      items: [
        { sku: b, quantity: 2 },
        { sku: a, quantity: 5 },
      ],
      customerId: 'cart-buyer',
      holdSeconds: 300,
    });
    expect(cart.status).toBe(201);
    expect(cart.body).toMatchObject({ status: 'reserved', customerId: 'cart-buyer' });
    expect(cart.body.sku).toBeUndefined();
    const items = cart.body.items as { sku: string; quantity: number; deductions: { quantity: number }[] }[];
    expect(items.map((i) => [i.sku, i.quantity])).toEqual(
      [
        [a, 5],
        [b, 2],
      ].sort((x, y) => (x[0]! < y[0]! ? -1 : 1)),
    );
    for (const item of items) expect(item.deductions.reduce((t, d) => t + d.quantity, 0)).toBe(item.quantity);

    const short = await post(1, '/orders', {
      items: [
        { sku: a, quantity: 1 },
        { sku: b, quantity: 2 },
      ],
    });
    expect(short.status).toBe(409);
    expect(short.body).toMatchObject({ code: 'out_of_stock', sku: b });
    expect(await view(a)).toMatchObject({ available: 5, reserved: 5 });
    expect(await view(b)).toMatchObject({ available: 1, reserved: 2 });

    expect((await post(1, `/orders/${cart.body.orderId}/confirm`)).body.status).toBe('confirmed');
    expect((await post(0, `/orders/${cart.body.orderId}/cancel`)).body.status).toBe('cancelled');
    expect(await view(a)).toMatchObject({ available: 10, reserved: 0, sold: 0 });
    expect(await view(b)).toMatchObject({ available: 3, reserved: 0, sold: 0 });
    const dup = await post(0, '/orders', {
      items: [
        { sku: a, quantity: 1 },
        { sku: a, quantity: 1 },
      ],
    });
    expect(dup.status).toBe(400);
    for (const sku of [a, b]) expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('refuses a cart at once when the instance knows one of its SKUs sold out, naming it', async () => {
    const [a, b] = [await createSku(5, 2), await createSku(1, 1)];
    expect((await post(0, '/orders', { sku: b, quantity: 1 })).status).toBe(201);
    // The instance now knows b's only segment is empty: the cart must still be answered, and by b.
    const cart = await post(0, '/orders', {
      items: [
        { sku: a, quantity: 1 },
        { sku: b, quantity: 1 },
      ],
    });
    expect(cart.status).toBe(409);
    expect(cart.body).toMatchObject({ code: 'out_of_stock', sku: b, available: 0 });
    expect(await view(a)).toMatchObject({ available: 5, reserved: 0, sold: 0 });
  });

  it('lists a customer\u2019s orders newest first, page by page', async () => {
    const sku = await createSku(20, 2);
    const customerId = `lister-${Date.now()}`;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await post(i, '/orders', { sku, quantity: 1, customerId })).body.orderId);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `/orders?customerId=${customerId}&limit=2${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await call(urls[seen.length % 2]!, 'GET', query);
      expect(page.status).toBe(200);
      expect(page.body.orders.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.orders.map((o: { orderId: string }) => o.orderId));
      cursor = page.body.nextCursor;
    } while (cursor);
    expect(seen).toEqual([...ids].reverse());
    expect((await call(urls[0]!, 'GET', '/orders?customerId=no%20spaces')).status).toBe(400);
    expect((await call(urls[0]!, 'GET', `/orders?customerId=${customerId}&limit=101`)).status).toBe(400);
  });

  it('replays a cart sent again with its Idempotency-Key, and refuses the key for another cart', async () => {
    const [a, b] = [await createSku(5, 1), await createSku(5, 1)];
    const body = {
      items: [
        { sku: a, quantity: 1 },
        { sku: b, quantity: 2 },
      ],
      holdSeconds: 60,
    };
    const key = { 'idempotency-key': uniqueSku('cart-key') };
    const first = await post(0, '/orders', body, key);
    const again = await post(1, '/orders', body, key);
    expect([first.status, again.status]).toEqual([201, 200]);
    expect(again.body).toEqual(first.body);
    const other = await post(0, '/orders', { ...body, holdSeconds: 61 }, key);
    expect(other.status).toBe(422);
    expect(await view(b)).toMatchObject({ available: 3, reserved: 2 });
  });
});
