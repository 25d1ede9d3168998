import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call, type RunningService, startService, testEndpoints, uniqueSku } from '../support/service.js';

const ADMIN_TOKEN = 'test-admin-token-0123456789';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

describe('adjustments and counted quantities', () => {
  let svc: RunningService;
  let db: Db;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN });
    db = createDatabase(testEndpoints().databaseUrl, 2);
  });
  afterAll(async () => {
    await svc.stop();
    await db?.destroy();
  });

  const create = async (stock: number, segments: number) => {
    const sku = uniqueSku('adj');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock, segments }, admin)).status).toBe(201);
    return sku;
  };
  const ledger = async (sku: string) =>
    (
      await db
        .selectFrom('stock_additions')
        .innerJoin('skus', 'skus.id', 'stock_additions.sku_id')
        .select(['kind', 'quantity', 'reason', 'actor', 'note', 'reference', 'available_after'])
        .where('skus.sku', '=', sku)
        .orderBy('stock_additions.id')
        .execute()
    ).map((row) => ({ ...row, quantity: Number(row.quantity) }));

  it('removes units from the fullest segments, recording the reason, the actor and what was left', async () => {
    const sku = await create(10, 4);
    const removed = await call(
      svc.url,
      'POST',
      `/skus/${sku}/adjustments`,
      { delta: -4, reason: 'damaged', note: 'water damage', reference: 'RMA-17' },
      admin,
    );
    expect(removed.status).toBe(200);
    expect(removed.body).toMatchObject({ stock: 6, available: 6, reserved: 0, sold: 0 });
    // 3 3 2 2: the two fullest give 3, then 1 more from the next.
    expect(removed.body.segmentStock.map((s: { available: number }) => s.available)).toEqual([0, 2, 2, 2]);
    expect(removed.body.movement).toMatchObject({
      kind: 'adjustment',
      quantity: -4,
      reason: 'damaged',
      actor: 'key:ADMIN_TOKEN',
      note: 'water damage',
      reference: 'RMA-17',
      orderId: null,
      availableAfter: 6,
    });
    const added = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: 3, reason: 'received' }, admin);
    expect(added.status).toBe(200);
    expect(added.body).toMatchObject({ stock: 9, available: 9 });
    expect(added.body.segmentStock.map((s: { available: number }) => s.available)).toEqual([1, 3, 3, 2]);
    expect(await ledger(sku)).toEqual([
      {
        kind: 'create',
        quantity: 10,
        reason: 'create',
        actor: null,
        note: null,
        reference: null,
        available_after: null,
      },
      {
        kind: 'adjustment',
        quantity: -4,
        reason: 'damaged',
        actor: 'key:ADMIN_TOKEN',
        note: 'water damage',
        reference: 'RMA-17',
        available_after: 6,
      },
      {
        kind: 'adjustment',
        quantity: 3,
        reason: 'received',
        actor: 'key:ADMIN_TOKEN',
        note: null,
        reference: null,
        available_after: 9,
      },
    ]);
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('refuses a removal beyond what is available whole, with what is available', async () => {
    const sku = await create(5, 2);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 2, holdSeconds: 600 })).status).toBe(201);
    const refused = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -4, reason: 'shrinkage' }, admin);
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'out_of_stock', sku, available: 3 });
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ stock: 5, available: 3, reserved: 2 });
    expect(await ledger(sku)).toHaveLength(1);
    const all = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -3, reason: 'shrinkage' }, admin);
    expect(all.body).toMatchObject({ stock: 2, available: 0, reserved: 2 });
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('sets a counted quantity only while available is what the caller compared, never touching reserved', async () => {
    const sku = await create(20, 3);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 2, holdSeconds: 600 })).status).toBe(201);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 3 })).status).toBe(201);
    const stale = await call(
      svc.url,
      'PUT',
      `/skus/${sku}/stock`,
      { available: 12, compareAvailable: 20, reason: 'cycle_count' },
      admin,
    );
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ code: 'stale_count', sku, available: 15 });
    expect(await ledger(sku)).toHaveLength(1);
    const set = await call(
      svc.url,
      'PUT',
      `/skus/${sku}/stock`,
      { available: 12, compareAvailable: 15, reason: 'cycle_count', reference: 'count-2026-12' },
      admin,
    );
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ stock: 17, available: 12, reserved: 2, sold: 3 });
    expect(set.body.movement).toMatchObject({ kind: 'count', quantity: -3, reason: 'cycle_count', availableAfter: 12 });
    const up = await call(
      svc.url,
      'PUT',
      `/skus/${sku}/stock`,
      { available: 30, ignoreCompare: true, reason: 'correction' },
      admin,
    );
    expect(up.body).toMatchObject({ stock: 35, available: 30, reserved: 2, sold: 3 });
    expect(up.body.movement.quantity).toBe(18);
    expect(booksViolations(await auditSku(db, sku))).toEqual([]);
  });

  it('answers 400 to bad reasons, missing notes, non-integers, a zero delta and a set without a compare', async () => {
    const sku = await create(5, 1);
    const bad: [string, string, unknown, RegExp][] = [
      ['POST', 'adjustments', { delta: -1, reason: 'stolen' }, /^reason: /],
      ['POST', 'adjustments', { delta: -1, reason: 'other' }, /^note: reason other needs a note/],
      ['POST', 'adjustments', { delta: 1.5, reason: 'received' }, /^delta: .*int/],
      ['POST', 'adjustments', { delta: 0, reason: 'received' }, /^delta: must not be 0/],
      ['POST', 'adjustments', { delta: 1 }, /^reason: /],
      ['POST', 'adjustments', { delta: 1, reason: 'received', extra: 1 }, /extra/],
      ['PUT', 'stock', { available: 3, reason: 'cycle_count' }, /^compareAvailable: give compareAvailable/],
      ['PUT', 'stock', { available: 3, compareAvailable: 5, ignoreCompare: true, reason: 'cycle_count' }, /not both/],
      ['PUT', 'stock', { available: -1, ignoreCompare: true, reason: 'cycle_count' }, /^available: /],
      ['PUT', 'stock', { available: 2.5, compareAvailable: 5, reason: 'cycle_count' }, /^available: .*int/],
      ['PUT', 'stock', { available: 2, ignoreCompare: false, reason: 'cycle_count' }, /^ignoreCompare: /],
    ];
    for (const [method, route, body, detail] of bad) {
      const answer = await call(svc.url, method, `/skus/${sku}/${route}`, body, admin);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body.detail, JSON.stringify(body)).toMatch(detail);
    }
    const other = await call(
      svc.url,
      'POST',
      `/skus/${sku}/adjustments`,
      { delta: -1, reason: 'other', note: 'sample' },
      admin,
    );
    expect(other.status).toBe(200);
    expect(await ledger(sku)).toHaveLength(2);
  });

  it('needs the stock:admin credential, and a refusal changes nothing', async () => {
    const sku = await create(5, 1);
    expect((await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -1, reason: 'damaged' })).status).toBe(
      401,
    );
    const put = await call(svc.url, 'PUT', `/skus/${sku}/stock`, {
      available: 1,
      ignoreCompare: true,
      reason: 'cycle_count',
    });
    expect(put.status).toBe(401);
    expect(
      (await call(svc.url, 'POST', `/skus/nope-${sku}/adjustments`, { delta: 1, reason: 'received' }, admin)).status,
    ).toBe(404);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ stock: 5, available: 5 });
  });

  it('replays an adjustment retried with its Idempotency-Key, removing nothing more', async () => {
    const sku = await create(10, 2);
    const headers = { ...admin, 'idempotency-key': `adj-${sku}` };
    const first = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -2, reason: 'damaged' }, headers);
    const again = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -2, reason: 'damaged' }, headers);
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(JSON.stringify(again.body)).toBe(JSON.stringify(first.body));
    const other = await call(svc.url, 'POST', `/skus/${sku}/adjustments`, { delta: -3, reason: 'damaged' }, headers);
    expect(other.status).toBe(422);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body).toMatchObject({ stock: 8, available: 8 });
  });
});
