import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

describe('bad input', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  let sku: string;
  beforeAll(async () => {
    // A database of its own, so that "changes nothing" is exact: on the shared one, work earlier test files left
    // behind (reservations expiring, waiting lines admitting their next tickets) changes it whenever it comes due.
    own = await createOwnDatabase('bad_input');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    svc = await startService({ MAX_ORDER_QUANTITY: '50', DATABASE_URL: own.url });
    sku = uniqueSku('bad');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 4 })).status).toBe(201);
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  /** Row counts and stock totals of every table: a rejected request must leave them exactly as they were. */
  const snapshot = async () =>
    (
      await sql<Record<string, string>>`
        select (select count(*) from skus) as skus, (select count(*) from orders) as orders,
               (select count(*) from stock_deductions) as deductions,
               (select coalesce(sum(available), 0) from stock_segments) as available,
               (select coalesce(sum(total_stock), 0) from skus) as stock,
               (select string_agg(segment_count::text, ',' order by id) from skus) as layouts`.execute(svc.service.db)
    ).rows[0];

  const expectProblem = (answer: Awaited<ReturnType<typeof call>>, status: number, code: string) => {
    expect(answer.status, JSON.stringify(answer.body)).toBe(status);
    expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(answer.body).toMatchObject({ status, code, title: expect.any(String), detail: expect.any(String) });
    expect(answer.body.type).toContain(code);
    expect(JSON.stringify(answer.body)).not.toMatch(/\bat .*\.(ts|js):\d+|select |insert |update |stock_segments/i);
  };

  it('rejects invalid order bodies with 400 and changes nothing', async () => {
    const before = await snapshot();
    const bodies: unknown[] = [
      {},
      { sku },
      { quantity: 1 },
      { sku, quantity: 0 },
      { sku, quantity: -3 },
      { sku, quantity: 1.5 },
      { sku, quantity: '2' },
      { sku, quantity: 51 },
      { sku, quantity: 1e300 },
      { sku, quantity: null },
      { sku: 42, quantity: 1 },
      { sku: '', quantity: 1 },
      { sku: 'x'.repeat(65), quantity: 1 },
      { sku: "a'; drop table orders; --", quantity: 1 },
      { sku: 'ünïcödé', quantity: 1 },
      { sku: 'ctrl\u0000char', quantity: 1 },
      { sku, quantity: 1, extra: true },
      { sku, quantity: 1, segments: 4 },
      JSON.parse('{"__proto__": {"quantity": 1}, "sku": "x"}'),
      { constructor: { prototype: {} }, sku, quantity: 1 },
      [],
      [{ sku, quantity: 1 }],
    ];
    for (const body of bodies) expectProblem(await call(svc.url, 'POST', '/orders', body), 400, 'bad_request');
    expect(await snapshot()).toEqual(before);
  });

  it('rejects malformed JSON, wrong content types, missing and oversized bodies', async () => {
    const before = await snapshot();
    expectProblem(await call(svc.url, 'POST', '/orders', '{"sku": "a", "quantity": 1'), 400, 'invalid_json');
    expectProblem(await call(svc.url, 'POST', '/orders', 'null'), 400, 'invalid_json');
    expectProblem(await call(svc.url, 'POST', '/orders', '123'), 400, 'invalid_json');
    const form = await fetch(`${svc.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `sku=${sku}&quantity=1`,
    });
    expect(form.status).toBe(415);
    const text = await fetch(`${svc.url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: '{}',
    });
    expect(text.status).toBe(415);
    const none = await fetch(`${svc.url}/orders`, { method: 'POST' });
    expect(none.status).toBe(400);
    const huge = JSON.stringify({ sku, quantity: 1, pad: 'x'.repeat(17 * 1024) });
    expectProblem(await call(svc.url, 'POST', '/orders', huge), 413, 'body_too_large');
    expect(await snapshot()).toEqual(before);
  });

  it('rejects invalid admin bodies, SKU names in paths and order ids', async () => {
    const before = await snapshot();
    const creates: unknown[] = [
      { sku: uniqueSku('c'), stock: -1, segments: 2 },
      { sku: uniqueSku('c'), stock: 1e12 + 1, segments: 2 },
      { sku: uniqueSku('c'), stock: 10, segments: 0 },
      { sku: uniqueSku('c'), stock: 10, segments: 1025 },
      { sku: uniqueSku('c'), stock: 10, segments: 2.5 },
      { sku: 'sp ace', stock: 10, segments: 2 },
      { sku: uniqueSku('c'), stock: 10 },
    ];
    for (const body of creates) expectProblem(await call(svc.url, 'POST', '/skus', body), 400, 'bad_request');
    expectProblem(await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: 0 }), 400, 'bad_request');
    expectProblem(await call(svc.url, 'PUT', `/skus/${sku}/segments`, { segments: '4' }), 400, 'bad_request');
    expectProblem(await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 0 }), 400, 'bad_request');
    expectProblem(await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: -5 }), 400, 'bad_request');
    expectProblem(await call(svc.url, 'GET', '/skus/bad%20name'), 400, 'bad_request');
    expectProblem(await call(svc.url, 'GET', '/skus/%E0%A4%A'), 400, 'bad_request');
    expectProblem(await call(svc.url, 'GET', '/orders/not-a-uuid'), 400, 'bad_request');
    expectProblem(await call(svc.url, 'GET', "/orders/1'%20or%201=1"), 400, 'bad_request');
    expectProblem(await call(svc.url, 'DELETE', `/skus/${sku}`), 405, 'method_not_allowed');
    expectProblem(await call(svc.url, 'GET', '/nowhere'), 404, 'route_not_found');
    expect(await snapshot()).toEqual(before);
  });
});
