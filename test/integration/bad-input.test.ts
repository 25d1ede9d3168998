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
    svc = await startService({
      MAX_ORDER_QUANTITY: '50',
      DATABASE_URL: own.url,
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    });
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
               (select string_agg(segment_count::text, ',' order by id) from skus) as layouts,
               (select string_agg(concat_ws(',', sku, sale_starts_at, sale_ends_at), ';' order by id) from skus)
                 as windows,
               (select string_agg(concat_ws(',', url, cursor), ';' order by id) from webhooks) as webhooks`.execute(
        svc.service.db,
      )
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

  it('refuses listing cursors that are not a nextCursor: any bytes, any length, never a 500', async () => {
    const before = await snapshot();
    const b64 = (text: string | Buffer) => Buffer.from(text).toString('base64url');
    const cursors = [
      'czoA', // `s:` and a NUL byte
      b64('s:a\u0000b'),
      b64(Buffer.from([0x73, 0x3a, 0xff, 0xfe])), // `s:` and bytes that are not UTF-8
      b64('s:'),
      b64('s:has space'),
      b64(`s:${'x'.repeat(65)}`),
      b64('s:ü'),
      b64('x:abc'),
      'czphYmM=', // `s:abc`, padded
      'czphYmN', // `s:abc` with unused bits set: the same bytes, another text
      'A',
      'x'.repeat(201),
    ];
    for (const cursor of cursors) {
      const answer = await call(svc.url, 'GET', `/skus?cursor=${encodeURIComponent(cursor)}`);
      expect(answer.status, cursor).toBe(400);
      expectProblem(answer, 400, 'bad_request');
    }
    // The cursor a page gives still leads on.
    const first = await call(svc.url, 'GET', '/skus?limit=1');
    expect(first.status).toBe(200);
    expect((await call(svc.url, 'GET', `/skus?cursor=${b64('s:abc')}`)).status).toBe(200);
    expect(await snapshot()).toEqual(before);
  });

  it('refuses sale dates outside the years 2000–9999 (UTC) on create and change, and SKUs named . or ..', async () => {
    const before = await snapshot();
    const outside = [
      '0000-01-01T00:00:00Z',
      '0001-01-01T00:00:00+14:00',
      '1999-12-31T23:59:59Z',
      '2000-01-01T00:30:00+01:00',
      '9999-12-31T23:59:59-14:00',
    ];
    for (const at of outside) {
      for (const field of ['saleStartsAt', 'saleEndsAt']) {
        const create = { sku: uniqueSku('win'), stock: 1, segments: 1, [field]: at };
        expectProblem(await call(svc.url, 'POST', '/skus', create), 400, 'bad_request');
        expectProblem(await call(svc.url, 'PATCH', `/skus/${sku}`, { [field]: at }), 400, 'bad_request');
      }
    }
    for (const name of ['.', '..']) {
      const answer = await call(svc.url, 'POST', '/skus', { sku: name, stock: 1, segments: 1 });
      expectProblem(answer, 400, 'bad_request');
      expect(answer.body.detail).toContain('not SKU names');
    }
    expect(await snapshot()).toEqual(before);
    // The edges of the range are taken.
    const edges = { saleStartsAt: '2000-01-01T00:00:00Z', saleEndsAt: '9999-12-31T23:59:59.999Z' };
    const edged = await call(svc.url, 'POST', '/skus', { sku: uniqueSku('edge'), stock: 1, segments: 1, ...edges });
    expect(edged.status).toBe(201);
    expect(edged.body).toMatchObject({ saleStartsAt: '2000-01-01T00:00:00.000Z', saleEndsAt: edges.saleEndsAt });
  });

  it('refuses event cursors past 2^53 − 1 instead of rounding them, and stores none', async () => {
    const hook = await call(svc.url, 'POST', '/webhooks', { url: 'http://127.0.0.1:9/in', types: ['sku.created'] });
    expect(hook.status).toBe(201);
    await call(svc.url, 'PATCH', `/webhooks/${hook.body.id}`, { enabled: false });
    const before = await snapshot();
    for (const after of ['999999999999999999', '9007199254740992', '90071992547409910']) {
      expectProblem(await call(svc.url, 'POST', `/webhooks/${hook.body.id}/replay`, { after }), 400, 'bad_request');
      expectProblem(await call(svc.url, 'GET', `/events?after=${after}`), 400, 'bad_request');
    }
    // As a JSON number, it is rounded by the parser before any schema sees it: refused as not a string.
    const asNumber = '{"after": 999999999999999999}';
    expectProblem(await call(svc.url, 'POST', `/webhooks/${hook.body.id}/replay`, asNumber), 400, 'bad_request');
    expect(await snapshot()).toEqual(before);
    expect((await call(svc.url, 'GET', `/events?after=9007199254740991`)).status).toBe(200);
  });

  it('reads rows written before the range was checked: a year-0 sale date lists as it is stored', async () => {
    const name = uniqueSku('y0');
    expect((await call(svc.url, 'POST', '/skus', { sku: name, stock: 2, segments: 1 })).status).toBe(201);
    await sql`update skus set sale_starts_at = '0001-01-01T00:00:00Z'::timestamptz - interval '1 year',
                              sale_ends_at = '0001-01-01T00:00:00+14:00' where sku = ${name}`.execute(svc.service.db);
    const listed = await call(svc.url, 'GET', `/skus?prefix=${name}`);
    expect(listed.status, JSON.stringify(listed.body)).toBe(200);
    expect(listed.body.skus).toMatchObject([
      { sku: name, saleStartsAt: '0000-01-01T00:00:00.000Z', saleEndsAt: '0000-12-31T10:00:00.000Z', onSale: false },
    ]);
    const read = await call(svc.url, 'GET', `/skus/${name}`);
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ saleStartsAt: '0000-01-01T00:00:00.000Z', onSale: false });
  });
});
