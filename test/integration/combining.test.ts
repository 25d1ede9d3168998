import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { readSegmentStates } from '../../src/orders/batch-statements.js';
import { BatchWriter, writeBatch } from '../../src/orders/order-writes.js';
import { type OrderWrite, type SegmentWrite } from '../../src/orders/batch-statements.js';
import { redisKeys } from '../../src/lock/keys.js';
import { auditSku } from '../support/invariants.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';

/** Orders sent all at once, spread over the instances. */
function burst(
  urls: string[],
  orders: number,
  body: (i: number) => object,
  headers: (i: number) => object = () => ({}),
) {
  return Promise.all(
    Array.from({ length: orders }, (_, i) =>
      call(urls[i % urls.length]!, 'POST', '/orders', body(i), headers(i) as Record<string, string>),
    ),
  );
}

/** Flat combining across two real service processes: one lock hold serves the orders queued behind it. */
describe('flat combining', () => {
  let db: Db;
  let combining: ServiceProcess[];
  let single: ServiceProcess;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    // A generous wait budget: on this 2-core machine a 503 would only blur the count.
    combining = await Promise.all([1, 2].map(() => ServiceProcess.spawn({ LOCK_WAIT_MS: '15000' })));
    single = await ServiceProcess.spawn({ LOCK_WAIT_MS: '15000', COMBINE_MAX_BATCH: '1' });
  });
  afterAll(async () => {
    await Promise.all([...combining, single].map((i) => i?.stop()));
    await db?.destroy();
  });

  it('sells exactly the stock of one segment to many concurrent orders, several of them per statement', async () => {
    const urls = combining.map((i) => i.url);
    const sku = uniqueSku('combine');
    expect((await call(urls[0]!, 'POST', '/skus', { sku, stock: 300, segments: 1 })).status).toBe(201);
    const batchesBefore = (await scrapeCounter(urls, 'stock_batch_orders_count')) ?? 0;
    const answers = await burst(urls, 400, (i) => ({ sku, quantity: (i % 2) + 1 }));

    const statuses = answers.map((a) => a.status);
    expect(new Set(statuses), statuses.join()).toEqual(new Set([201, 409]));
    const placed = answers.filter((a) => a.status === 201).map((a) => a.body);
    const audit = await auditSku(db, sku);
    // 600 units demanded, 300 supplied: every unit sold once, each order with its ledger row.
    expect(placed.reduce((total, o) => total + o.quantity, 0)).toBe(300);
    expect(audit).toMatchObject({ sold: 300, soldCounted: 300, available: 0, negativeSegments: 0 });
    expect(audit).toMatchObject({ ordersWithoutLedger: 0, ordersLedgerMismatch: 0, ledgerOrders: placed.length });
    for (const order of placed) expect(order.deductions).toEqual([{ segment: 0, quantity: order.quantity }]);
    // Fewer batches than orders: holders served orders queued behind them.
    const batches = ((await scrapeCounter(urls, 'stock_batch_orders_count')) ?? 0) - batchesBefore;
    expect(batches).toBeGreaterThan(0);
    expect(batches).toBeLessThan(placed.length);
  });

  it('places one order for concurrent requests with one Idempotency-Key, whichever batches they land in', async () => {
    const urls = combining.map((i) => i.url);
    const sku = uniqueSku('combine-key');
    expect((await call(urls[0]!, 'POST', '/skus', { sku, stock: 1_000, segments: 1 })).status).toBe(201);
    // Forty orders under four keys, and forty without: the keyed ones must collapse to four orders.
    const answers = await burst(
      urls,
      80,
      () => ({ sku, quantity: 2 }),
      (i) => (i % 2 === 0 ? { 'idempotency-key': `${sku}-key-${i % 8}` } : {}),
    );
    expect(answers.every((a) => a.status === 201 || a.status === 200)).toBe(true);
    const byKey = new Map<string, Set<string>>();
    answers.forEach((a, i) => {
      if (i % 2 !== 0) return;
      const key = `key-${i % 8}`;
      byKey.set(key, (byKey.get(key) ?? new Set()).add(a.body.orderId));
    });
    expect(byKey.size).toBe(4);
    for (const ids of byKey.values()) expect(ids.size).toBe(1);
    const audit = await auditSku(db, sku);
    expect(audit).toMatchObject({ ledgerOrders: 44, sold: 88, soldCounted: 88, available: 912 });
  });

  it('takes one order per batch with COMBINE_MAX_BATCH=1, and the books stay exact', async () => {
    const sku = uniqueSku('combine-off');
    expect((await call(single.url, 'POST', '/skus', { sku, stock: 100, segments: 1 })).status).toBe(201);
    const before = {
      batches: (await scrapeCounter([single.url], 'stock_batch_orders_count')) ?? 0,
      orders: (await scrapeCounter([single.url], 'stock_batch_orders_sum')) ?? 0,
    };
    const answers = await burst([single.url], 150, () => ({ sku, quantity: 1 }));
    expect(answers.filter((a) => a.status === 201)).toHaveLength(100);
    const batches = ((await scrapeCounter([single.url], 'stock_batch_orders_count')) ?? 0) - before.batches;
    const orders = ((await scrapeCounter([single.url], 'stock_batch_orders_sum')) ?? 0) - before.orders;
    expect(batches).toBe(100);
    expect(orders).toBe(100);
    expect(await auditSku(db, sku)).toMatchObject({ sold: 100, soldCounted: 100, available: 0 });
  });
});

/** BATCHES_IN_FLIGHT bounds the batches that plan, lock, read or write: not those asleep in a business step. */
describe('batches in flight', () => {
  let db: Db;
  let redis: Redis;
  let service: ServiceProcess;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    redis = new Redis(testEndpoints().redisUrl);
    // Two runners, one order per batch, a long business step: without the exemption, two segments held at most.
    const env = { BATCHES_IN_FLIGHT: '2', COMBINE_MAX_BATCH: '1', CRITICAL_SECTION_DELAY_MS: '1500' };
    service = await ServiceProcess.spawn({ ...env, LOCK_WAIT_MS: '15000' });
  });
  afterAll(async () => {
    await service?.stop();
    redis?.disconnect();
    await db?.destroy();
  });

  it('keeps more segments held at once than batches in flight while their business steps sleep', async () => {
    const sku = uniqueSku('in-flight');
    expect((await call(service.url, 'POST', '/skus', { sku, stock: 60, segments: 6 })).status).toBe(201);
    const locks = Array.from({ length: 6 }, (_, segment) =>
      redisKeys.lock(redisKeys.segmentLock({ sku, layoutVersion: 1, segment })),
    );
    let answered = false;
    const answers = burst([service.url], 6, () => ({ sku, quantity: 1 })).finally(() => (answered = true));
    // The most segment locks seen held at once, read from Redis while the orders are in their steps.
    let mostHeld = 0;
    while (!answered) {
      mostHeld = Math.max(mostHeld, await redis.exists(...locks));
      await sleep(5);
    }
    expect((await answers).map((a) => a.status)).toEqual(Array(6).fill(201));
    expect(mostHeld).toBeGreaterThan(2);
    expect(await auditSku(db, sku)).toMatchObject({ sold: 6, soldCounted: 6, available: 54, negativeSegments: 0 });
  });
});

/** The batch statement itself, against real rows: what one fenced write of a batch may and may not do. */
describe('the batch statement', () => {
  let db: Db;
  let service: ServiceProcess;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    service = await ServiceProcess.spawn({});
  });
  afterAll(async () => {
    await service?.stop();
    await db?.destroy();
  });

  const oneSegmentSku = async (stock: number) => {
    const sku = uniqueSku('batch-stmt');
    expect((await call(service.url, 'POST', '/skus', { sku, stock, segments: 1 })).status).toBe(201);
    const { id } = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
    const row = { skuId: id, layoutVersion: 1, segment: 0 };
    return { sku, row, state: (await readSegmentStates(db, [row]))[0]! };
  };
  /** One order taking `quantity` from the batch's segment `segment`. */
  const order = (skuId: number, quantity: number, idempotencyKey: string | null = null, segment = 0): OrderWrite => ({
    orderId: randomUUID(),
    skuId,
    idempotencyKey,
    requestFingerprint: idempotencyKey && 'fp',
    customerId: null,
    holdSeconds: null,
    takes: [{ segment, quantity }],
    limitedSkuIds: [],
  });

  /** The write of the holder of `row` that read `state` and took the lock with `fence`. */
  const holderOf = (
    row: { skuId: number; layoutVersion: number; segment: number },
    state: { available: number; fence: number },
    fence = state.fence + 1,
  ): SegmentWrite => ({
    ...row,
    limitClaimed: false,
    availableSeen: state.available,
    fenceSeen: state.fence,
    fence,
  });

  it('writes the batches that queue behind the running statements in one statement, each answered its own', async () => {
    const writer = new BatchWriter(db);
    const skus = await Promise.all(Array.from({ length: 6 }, () => oneSegmentSku(10)));
    const batches = skus.map(({ row, state }, i) => ({
      segments: [holderOf(row, state)],
      orders: [order(row.skuId, 1 + (i % 3)), order(row.skuId, 2)],
    }));
    // The first two start a statement each; the four that arrive while both run wait for the next one.
    const results = await Promise.all(batches.map((batch) => writer.write(batch)));
    for (const [i, result] of results.entries()) {
      expect(result.written).toEqual(new Set([0]));
      expect([...result.placed.keys()].sort()).toEqual(batches[i]!.orders.map((o) => o.orderId).sort());
      const sold = 1 + (i % 3) + 2;
      expect(await auditSku(db, skus[i]!.sku)).toMatchObject({ sold, soldCounted: sold, available: 10 - sold });
    }
    // One statement, one transaction: the four queued batches' orders share its start time; the first two do not.
    const placedAt = results.map((r) => [...r.placed.values()][0]!.createdAt.getTime());
    expect(new Set(placedAt.slice(2)).size).toBe(1);
    expect(placedAt[0]).not.toBe(placedAt[2]);
  });

  it('writes a second batch on the same segment in a statement of its own, where the fence judges it', async () => {
    const writer = new BatchWriter(db);
    const others = await Promise.all([oneSegmentSku(10), oneSegmentSku(10)]);
    const { sku, row, state } = await oneSegmentSku(10);
    // A holder whose lease ran out before its write, and the holder after it: both read the row before either wrote.
    const stalled = { segments: [holderOf(row, state)], orders: [order(row.skuId, 3)] };
    const next = { segments: [holderOf(row, state, state.fence + 2)], orders: [order(row.skuId, 4)] };
    const busy = others.map((o) =>
      writer.write({ segments: [holderOf(o.row, o.state)], orders: [order(o.row.skuId, 1)] }),
    );
    // Both queue behind the two running statements; in one statement both would pass the fence.
    const [first, second] = await Promise.all([writer.write(stalled), writer.write(next)]);
    await Promise.all(busy);
    expect(first.placed.size).toBe(1);
    expect(second).toMatchObject({ written: new Set(), placed: new Map() });
    expect(await auditSku(db, sku)).toMatchObject({ sold: 3, soldCounted: 3, available: 7, ledgerOrders: 1 });
  });

  it('writes nothing at all when the fence refuses the segment write', async () => {
    const { sku, row, state } = await oneSegmentSku(10);
    const orders = [order(row.skuId, 2), order(row.skuId, 3), order(row.skuId, 1)];
    // The row's token moved on since this holder's read: a newer holder wrote it.
    const stale = { ...row, limitClaimed: false, availableSeen: state.available, fenceSeen: state.fence - 1 };
    const refused = await writeBatch(db, { segments: [{ ...stale, fence: state.fence + 5 }], orders });
    expect(refused).toMatchObject({ written: new Set(), placed: new Map() });
    // A token no newer than the row's last writer's is refused too.
    const old = { ...row, limitClaimed: false, availableSeen: state.available, fenceSeen: state.fence };
    expect((await writeBatch(db, { segments: [{ ...old, fence: state.fence }], orders })).written.size).toBe(0);
    expect(await auditSku(db, sku)).toMatchObject({ sold: 0, soldCounted: 0, available: 10, ledgerOrders: 0 });
  });

  it('skips an order whose Idempotency-Key is taken, and places the rest of its batch', async () => {
    const { sku, row } = await oneSegmentSku(10);
    const key = `${sku}-taken`;
    const first = await call(service.url, 'POST', '/orders', { sku, quantity: 1 }, { 'idempotency-key': key });
    expect(first.status).toBe(201);
    const now = (await readSegmentStates(db, [row]))[0]!;
    // The key as the service stored it: scoped to its caller, here one without a credential.
    const orders = [order(row.skuId, 2), order(row.skuId, 4, `anonymous ${key}`), order(row.skuId, 3)];
    const segment = { ...row, limitClaimed: false, availableSeen: now.available, fenceSeen: now.fence };
    const result = await writeBatch(db, { segments: [{ ...segment, fence: now.fence + 1 }], orders });
    expect(result.written).toEqual(new Set([0]));
    expect([...result.placed.keys()].sort()).toEqual([orders[0]!.orderId, orders[2]!.orderId].sort());
    // 10 − 1 (the first order) − 2 − 3: the skipped order took nothing.
    expect(await auditSku(db, sku)).toMatchObject({ sold: 6, soldCounted: 6, available: 4, ledgerOrders: 3 });
  });

  it('writes the segments whose fence holds, and leaves out only the orders on a refused one', async () => {
    const a = await oneSegmentSku(10);
    const b = await oneSegmentSku(10);
    const segments = [
      {
        ...a.row,
        limitClaimed: false,
        availableSeen: a.state.available,
        fenceSeen: a.state.fence,
        fence: a.state.fence + 1,
      },
      // b's holder read a token that is not the row's: a newer holder wrote it since.
      {
        ...b.row,
        limitClaimed: false,
        availableSeen: b.state.available,
        fenceSeen: b.state.fence - 1,
        fence: b.state.fence + 1,
      },
    ];
    const cart: OrderWrite = {
      ...order(0, 0),
      skuId: null,
      takes: [
        { segment: 0, quantity: 1 },
        { segment: 1, quantity: 1 },
      ],
    };
    const orders = [order(a.row.skuId, 2), order(b.row.skuId, 3, null, 1), cart, order(a.row.skuId, 4)];
    const result = await writeBatch(db, { segments, orders });
    expect(result.written).toEqual(new Set([0]));
    // The cart takes from both: it is left out with b's order, and takes nothing from a either.
    expect([...result.placed.keys()].sort()).toEqual([orders[0]!.orderId, orders[3]!.orderId].sort());
    expect(await auditSku(db, a.sku)).toMatchObject({ sold: 6, soldCounted: 6, available: 4, ledgerOrders: 2 });
    expect(await auditSku(db, b.sku)).toMatchObject({ sold: 0, soldCounted: 0, available: 10, ledgerOrders: 0 });
  });
});
