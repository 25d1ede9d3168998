import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { RedisCluster } from '../support/servers/index.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { statusCounts } from '../support/order-load.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';

/**
 * Where the services keep their locks: the test run's Redis, or a Redis Cluster of 3 primaries and 3 replicas started
 * here, on which each segment's lock lives in its own slot and every notice is a shard channel.
 */
const redisSetups: [string, () => Promise<{ env: Record<string, string>; stop: () => Promise<void> }>][] = [
  ['one Redis', async () => ({ env: {}, stop: async () => {} })],
  [
    'a Redis Cluster',
    async () => {
      const cluster = await RedisCluster.start();
      return { env: { REDIS_URL: '', REDIS_CLUSTER_NODES: cluster.seeds }, stop: () => cluster.destroy() };
    },
  ],
];

describe.each(redisSetups)('several service processes on %s and one Postgres', (setup, startRedis) => {
  let instances: ServiceProcess[] = [];
  let db: Db;
  let stopRedis: () => Promise<void> = async () => {};
  beforeAll(async () => {
    const redis = await startRedis();
    stopRedis = redis.stop;
    // A generous wait budget: this 2-core machine also runs the load generator; 503s would only blur the count.
    instances = await Promise.all([1, 2, 3].map(() => ServiceProcess.spawn({ LOCK_WAIT_MS: '15000', ...redis.env })));
    db = createDatabase(testEndpoints().databaseUrl, 2);
  });
  /**
   * Each instance opens its Postgres pool before a burst: twenty connections per instance set up at once on a busy
   * 2-core machine can outlast the pool's 2 s connect timeout, a 503 these tests are not about. (The order path's own
   * pool is opened at start.)
   */
  const warmPools = async (sku: string) => {
    for (const instance of instances) {
      await Promise.all(Array.from({ length: 20 }, () => call(instance.url, 'GET', `/skus/${sku}`)));
    }
  };
  afterAll(async () => {
    await Promise.all(instances.map((i) => i.stop()));
    await db?.destroy();
    await stopRedis();
  });

  it('sells exactly the stock to 1,200 concurrent orders, each acknowledged order in the ledger', async () => {
    const sku = uniqueSku('xproc');
    const stock = 1000;
    expect((await call(instances[0]!.url, 'POST', '/skus', { sku, stock, segments: 16 })).status).toBe(201);
    await warmPools(sku);

    // Every instance gets orders of 1, 2 and 3 units alike. (Quantities that followed the instance would leave one
    // instance with all the one-unit orders: should it place them all early, a last unit can stay unsold.)
    const answers = await Promise.all(
      Array.from({ length: 1200 }, (_, i) =>
        call(instances[i % instances.length]!.url, 'POST', '/orders', {
          sku,
          quantity: (Math.floor(i / instances.length) % 3) + 1,
        }),
      ),
    );

    const byStatus = new Map<number, number>();
    for (const a of answers) byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1);
    expect(
      [...byStatus.keys()].sort(),
      JSON.stringify([[...byStatus], answers.filter((a) => a.status >= 500).map((a) => a.body)]),
    ).toEqual([201, 409]);

    const placed = answers.filter((a) => a.status === 201).map((a) => a.body);
    const soldByAnswers = placed.reduce((total, o) => total + o.quantity, 0);
    const audit = await auditSku(db, sku);
    // Demand (2,400 units) far exceeds supply: every unit is sold, none twice.
    expect(audit.sold).toBe(stock);
    expect(audit.soldCounted).toBe(stock);
    expect(soldByAnswers).toBe(stock);
    expect(audit.available).toBe(0);
    expect(audit.negativeSegments).toBe(0);
    expect(audit.ordersLedgerMismatch).toBe(0);
    expect(audit.ledgerOrders).toBe(placed.length);

    const ledger = await db
      .selectFrom('stock_deductions')
      .select(['order_id', (eb) => eb.fn.sum<number>('quantity').as('quantity')])
      .where(
        'order_id',
        'in',
        placed.map((o) => o.orderId),
      )
      .groupBy('order_id')
      .execute();
    const ledgerByOrder = new Map(ledger.map((row) => [row.order_id, Number(row.quantity)]));
    for (const order of placed) expect(ledgerByOrder.get(order.orderId)).toBe(order.quantity);

    const view = await call(instances[2]!.url, 'GET', `/skus/${sku}`);
    expect(view.body).toMatchObject({ stock, available: 0, sold: stock });
  });

  it('places carts over two SKUs listed in both orders without deadlock, and keeps both books exact', async () => {
    const [a, b] = [uniqueSku('xcart-a'), uniqueSku('xcart-b')];
    for (const sku of [a, b]) {
      expect((await call(instances[0]!.url, 'POST', '/skus', { sku, stock: 60, segments: 4 })).status).toBe(201);
    }
    await warmPools(a);
    const lines = [
      { sku: a, quantity: 1 },
      { sku: b, quantity: 1 },
    ];
    const answers = await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        call(instances[i % instances.length]!.url, 'POST', '/orders', {
          items: i % 2 === 0 ? lines : [...lines].reverse(),
        }),
      ),
    );
    // 80 carts of one unit of each SKU, 60 units of each: 60 carts placed, 20 refused, none stuck behind another.
    // Once in many runs some carts have waited out their whole budget (503): the message keeps what explains it.
    const failed = answers.filter((a) => a.status >= 500).map((a) => a.body);
    const warnings = instances.flatMap((i) => i.output.filter((line) => /"level":(40|50)/.test(line))).slice(-20);
    expect(statusCounts(answers), JSON.stringify({ failed, warnings })).toEqual({ 201: 60, 409: 20 });
    for (const sku of [a, b]) {
      const audit = await auditSku(db, sku);
      expect(booksViolations(audit)).toEqual([]);
      expect(audit).toMatchObject({ sold: 60, available: 0 });
    }
  });

  it('sells a hot SKU and forty quiet ones to mixed orders and carts across SKUs: books exact, no order lost', async () => {
    const hot = uniqueSku('xmix-hot');
    const quiet = Array.from({ length: 40 }, (_, i) => uniqueSku(`xmix-${i}`));
    const stockOf = new Map([[hot, 200], ...quiet.map((sku) => [sku, 12] as const)]);
    for (const [sku, stock] of stockOf) {
      const segments = sku === hot ? 20 : 3;
      expect((await call(instances[0]!.url, 'POST', '/skus', { sku, stock, segments })).status).toBe(201);
    }
    await warmPools(hot);
    // A fixed, seeded mix, so a failure can be replayed: 20 % hot, 60 % one quiet SKU, 20 % carts over two quiet SKUs.
    let seed = 17;
    const random = (n: number) => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % n;
    const bodies = Array.from({ length: 900 }, () => {
      const kind = random(10);
      if (kind < 2) return { sku: hot, quantity: 1 + random(2) };
      const a = quiet[random(quiet.length)]!;
      if (kind < 8) return { sku: a, quantity: 1 + random(3) };
      const b = quiet.filter((sku) => sku !== a)[random(quiet.length - 1)]!;
      return {
        items: [
          { sku: a, quantity: 1 },
          { sku: b, quantity: 1 + random(2) },
        ],
      };
    });
    const answers: Awaited<ReturnType<typeof call>>[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 60 }, async () => {
        while (next < bodies.length) {
          const i = next++;
          answers[i] = await call(instances[i % instances.length]!.url, 'POST', '/orders', bodies[i]!);
        }
      }),
    );
    expect(statusCounts(answers)[201]).toBeGreaterThan(0);
    expect(
      Object.keys(statusCounts(answers)).sort(),
      JSON.stringify(bodies.filter((_, i) => answers[i]!.status >= 500)),
    ).toEqual(['201', '409']);
    // Every acknowledged unit is in the books of its SKU, and nothing else is.
    const acknowledged = new Map<string, { units: number; orders: number }>();
    for (const answer of answers.filter((a) => a.status === 201)) {
      for (const item of answer.body.items as { sku: string; quantity: number }[]) {
        const seen = acknowledged.get(item.sku) ?? { units: 0, orders: 0 };
        acknowledged.set(item.sku, { units: seen.units + item.quantity, orders: seen.orders + 1 });
      }
    }
    for (const [sku, stock] of stockOf) {
      const audit = await auditSku(db, sku);
      expect(booksViolations(audit), sku).toEqual([]);
      expect(audit.sold, sku).toBe(acknowledged.get(sku)?.units ?? 0);
      expect(audit.ledgerOrders, sku).toBe(acknowledged.get(sku)?.orders ?? 0);
      expect(audit.sold, sku).toBeLessThanOrEqual(stock);
    }
  });

  it('holds one customer hammering a limited SKU from every instance to the limit', async () => {
    const sku = uniqueSku('xlimit');
    const created = await call(instances[0]!.url, 'POST', '/skus', { sku, stock: 100, segments: 4, maxPerCustomer: 3 });
    expect(created.status).toBe(201);
    await warmPools(sku);
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        call(instances[i % instances.length]!.url, 'POST', '/orders', {
          sku,
          quantity: 1,
          customerId: 'hammer',
          ...(i % 2 === 0 && { holdSeconds: 600 }),
        }),
      ),
    );
    expect(statusCounts(answers)).toEqual({ 201: 3, 409: 47 });
    for (const refused of answers.filter((a) => a.status === 409)) {
      expect(refused.body).toMatchObject({ code: 'purchase_limit', remaining: 0 });
    }
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit.sold + audit.reserved).toBe(3);
  });
});
