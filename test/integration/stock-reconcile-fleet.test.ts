import pMap from 'p-map';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { statusCounts } from '../support/order-load.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';

const ADMIN_TOKEN = 'test-admin-token-0123456789';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

/** Adjustments and counted sets made by two service processes while both sell the SKU to a flood of orders. */
describe('stock reconciled during a flood of orders, across two processes', () => {
  let instances: ServiceProcess[] = [];
  let db: Db;
  beforeAll(async () => {
    // A generous wait budget: this 2-core machine also runs the load; 503s would only blur the count.
    instances = await Promise.all([1, 2].map(() => ServiceProcess.spawn({ LOCK_WAIT_MS: '15000', ADMIN_TOKEN })));
    db = createDatabase(testEndpoints().databaseUrl, 2);
  });
  afterAll(async () => {
    await Promise.all(instances.map((i) => i.stop()));
    await db?.destroy();
  });

  it('applies 50 adjustments and 20 counted sets exactly among 1,500 orders; every stale set changes nothing', async () => {
    const sku = uniqueSku('reconcile');
    const stock = 1000;
    expect((await call(instances[0]!.url, 'POST', '/skus', { sku, stock, segments: 20 }, admin)).status).toBe(201);
    const url = (i: number) => instances[i % instances.length]!.url;

    // 70 stock changes, one fired after every 21st order answered, so they land all through the flood: 50
    // adjustments (+3 and −5 in turn), and 20 counted sets, every fifth of them compared with a value the SKU cannot
    // hold (deliberately stale). The others compare with what was read just before, which orders may have changed.
    type Attempt = { compare?: number; answer: Awaited<ReturnType<typeof call>> };
    type Change = { kind: 'adjustment' | 'count'; stale: boolean; attempts: Attempt[] };
    const counts = Array.from({ length: 20 }, (_, c): Change => ({ kind: 'count', stale: c % 5 === 4, attempts: [] }));
    const changes: Change[] = Array.from({ length: 70 }, (_, i) =>
      i % 7 === 2 || i % 7 === 5 ? counts.shift()! : { kind: 'adjustment', stale: false, attempts: [] },
    );
    let adjustments = 0;
    const runChange = async (change: Change, i: number) => {
      if (change.kind === 'adjustment') {
        const delta = adjustments++ % 2 === 0 ? 3 : -5;
        const answer = await call(url(i), 'POST', `/skus/${sku}/adjustments`, { delta, reason: 'correction' }, admin);
        change.attempts.push({ answer });
        return;
      }
      // A caller whose count went stale recounts from the value the refusal names, as the docs advise.
      let seen = (await call(url(i + 1), 'GET', `/skus/${sku}`)).body.available as number;
      for (let attempt = 0; ; attempt++) {
        const compare = change.stale ? seen + 1_000_000 : seen;
        const body = { available: seen + 10, compareAvailable: compare, reason: 'cycle_count' };
        const answer = await call(url(i + attempt), 'PUT', `/skus/${sku}/stock`, body, admin);
        change.attempts.push({ compare, answer });
        if (change.stale || answer.status !== 409 || attempt === 100) return;
        seen = answer.body.available;
      }
    };
    const pending: Promise<void>[] = [];
    let answered = 0;
    let next = 0;
    const orders = await pMap(
      Array.from({ length: 1500 }, (_, i) => i),
      async (i) => {
        const answer = await call(url(i), 'POST', '/orders', { sku, quantity: 1 });
        if (++answered % 21 === 0 && next < changes.length) {
          const index = next++;
          pending.push(runChange(changes[index]!, index));
        }
        return answer;
      },
      { concurrency: 60 },
    );
    while (next < changes.length) {
      const index = next++;
      pending.push(runChange(changes[index]!, index));
    }
    await Promise.all(pending);

    const byStatus = statusCounts(orders);
    expect(Object.keys(byStatus).sort(), JSON.stringify(byStatus)).toEqual(byStatus[409] ? ['201', '409'] : ['201']);
    const attempts = changes.flatMap((change) => change.attempts.map((attempt) => ({ ...attempt, change })));
    for (const { change, compare, answer } of attempts) {
      const { status, body } = answer;
      if (change.stale) expect(status, JSON.stringify(body)).toBe(409);
      if (status === 409) {
        expect(body.code).toBe(change.kind === 'count' ? 'stale_count' : 'out_of_stock');
        expect(Number.isInteger(body.available)).toBe(true);
        if (change.kind === 'count') expect(body.available).not.toBe(compare);
      } else {
        expect(status, JSON.stringify(body)).toBe(200);
        expect(body.movement.kind).toBe(change.kind);
      }
    }

    // What the answers say was added and removed is what the SKU holds, and exactly those changes are in its log.
    const applied = attempts.filter((a) => a.answer.status === 200).map((a) => a.answer.body.movement);
    const netChange = applied.reduce((total, m) => total + m.quantity, 0);
    const sold = byStatus[201]!;
    const view = (await call(url(0), 'GET', `/skus/${sku}`)).body;
    expect(view).toMatchObject({ stock: stock + netChange, sold, reserved: 0 });
    expect(view.available + view.reserved + view.sold).toBe(stock + netChange);
    const log = await db
      .selectFrom('stock_additions')
      .innerJoin('skus', 'skus.id', 'stock_additions.sku_id')
      .select(['stock_additions.id', 'stock_additions.kind', 'stock_additions.quantity'])
      .where('skus.sku', '=', sku)
      .where('stock_additions.kind', 'in', ['adjustment', 'count'])
      .orderBy('stock_additions.id')
      .execute();
    expect(log.map((row) => ({ id: String(row.id), kind: row.kind, quantity: Number(row.quantity) }))).toEqual(
      [...applied]
        .sort((a, b) => Number(a.id) - Number(b.id))
        .map((m) => ({ id: m.id, kind: m.kind, quantity: m.quantity })),
    );
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit).toMatchObject({ totalStock: stock + netChange, sold, negativeSegments: 0 });
    // Every adjustment and every count not stale on purpose was applied in the end, the 4 stale ones never.
    expect(applied.filter((m) => m.kind === 'count')).toHaveLength(16);
    expect(applied.filter((m) => m.kind === 'adjustment').length).toBeGreaterThan(0);
    expect(changes.filter((c) => c.stale && c.attempts.length === 1)).toHaveLength(4);
  }, 180_000);
});
