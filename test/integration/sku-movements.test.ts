import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { movementsStatement } from '../../src/stock/movement-history.js';
import type { Movement } from '../../src/stock/movement.js';
import { bearer, serviceKey, writeKeysFile } from '../security/credentials.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { explainScans } from '../support/query-plan.js';
import { call, type RunningService, startService, testEndpoints, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

interface Page {
  sku: string;
  movements: Movement[];
  nextCursor: string | null;
}

/** GET /skus/:sku/movements against the real service: the history read from the ledger the service writes. */
describe('a SKU’s movement history', () => {
  const adminKey = serviceKey('ops', ['stock:admin', 'orders:place', 'orders:read', 'orders:manage']);
  const readerKey = serviceKey('shop-front', ['orders:read', 'orders:place']);
  const admin = bearer(adminKey.key);
  let svc: RunningService;
  let db: Db;
  beforeAll(async () => {
    svc = await startService({ API_KEYS_FILE: writeKeysFile([adminKey, readerKey]) });
    db = createDatabase(testEndpoints().databaseUrl, 2);
  });
  afterAll(async () => {
    await svc?.stop();
    await db?.destroy();
  });

  const send = async (method: string, path: string, body?: unknown, status = 200) => {
    const answer = await call(svc.url, method, path, body, admin);
    expect(answer.status, JSON.stringify(answer.body)).toBe(status);
    return answer.body;
  };
  const create = async (stock: number, segments: number) => {
    const sku = uniqueSku('moves');
    await send('POST', '/skus', { sku, stock, segments }, 201);
    return sku;
  };
  const order = (sku: string, quantity: number, extra: Record<string, unknown> = {}) =>
    send('POST', '/orders', { sku, quantity, ...extra }, 201) as Promise<{ orderId: string }>;
  const page = async (sku: string, query = ''): Promise<Page> => send('GET', `/skus/${sku}/movements?${query}`);
  /** The whole history, page by page; `between` runs after each page (to write movements meanwhile). */
  const history = async (sku: string, query = '', between?: (pages: number) => Promise<void>) => {
    const movements: Movement[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const got: Page = await page(sku, `${query}${cursor ? `&cursor=${cursor}` : ''}`);
      movements.push(...got.movements);
      cursor = got.nextCursor;
      await between?.(++pages);
    } while (cursor !== null);
    return movements;
  };
  const sum = (movements: Movement[]) => movements.reduce((total, m) => total + m.quantity, 0);

  it('lists every kind of movement with its fields, newest first, adding up to what is available', async () => {
    const sku = await create(10, 2);
    await send('POST', `/skus/${sku}/restock`, { quantity: 6 });
    await send('POST', `/skus/${sku}/adjustments`, { delta: -2, reason: 'damaged', note: 'wet', reference: 'RMA-1' });
    await send('PUT', `/skus/${sku}/stock`, { available: 12, compareAvailable: 14, reason: 'cycle_count' });
    const sold = await order(sku, 3);
    const cancelled = await order(sku, 2, { holdSeconds: 600 });
    await send('POST', `/orders/${cancelled.orderId}/cancel`);
    const refunded = await order(sku, 1);
    await send('POST', `/orders/${refunded.orderId}/cancel`);
    const expired = await order(sku, 1, { holdSeconds: 1 });
    const expiredBack = () => db.selectFrom('stock_returns').select('order_id').where('order_id', '=', expired.orderId);
    expect(await waitFor(async () => (await expiredBack().execute()).length > 0, 10_000)).toBeLessThan(Infinity);
    const live = await order(sku, 4, { holdSeconds: 600 });

    const movements = await history(sku, 'limit=100');
    const base = { actor: null, note: null, reference: null, orderId: null, availableAfter: null };
    const orderOf = (id: string, kind: string, quantity: number, reason: string | null) => ({
      ...base,
      kind,
      quantity,
      reason,
      orderId: id,
      id: `${kind}:${id}`,
    });
    expect(movements).toEqual(
      [
        orderOf(live.orderId, 'order', -4, null),
        orderOf(expired.orderId, 'expiry', 1, 'expired'),
        orderOf(expired.orderId, 'order', -1, null),
        orderOf(refunded.orderId, 'cancel', 1, 'refund'),
        orderOf(refunded.orderId, 'order', -1, null),
        orderOf(cancelled.orderId, 'cancel', 2, 'cancelled'),
        orderOf(cancelled.orderId, 'order', -2, null),
        orderOf(sold.orderId, 'order', -3, null),
        { ...base, kind: 'count', quantity: -2, reason: 'cycle_count', actor: 'key:ops', availableAfter: 12 },
        {
          ...base,
          kind: 'adjustment',
          quantity: -2,
          reason: 'damaged',
          actor: 'key:ops',
          note: 'wet',
          reference: 'RMA-1',
          availableAfter: 14,
        },
        { ...base, kind: 'restock', quantity: 6, reason: 'restock' },
        { ...base, kind: 'create', quantity: 10, reason: 'create', availableAfter: 10 },
      ].map((expected, i) => ({ id: movements[i]!.id, ...expected, at: movements[i]!.at })),
    );
    const times = movements.map((m) => Date.parse(m.at));
    expect(times).toEqual([...times].sort((a, b) => b - a));
    expect(new Set(movements.map((m) => m.id)).size).toBe(movements.length);

    // The books identity: what the history added and took is what is available; reserved and sold units left it.
    const view = await send('GET', `/skus/${sku}`);
    expect(view).toMatchObject({ available: 5, reserved: 4, sold: 3, stock: 12 });
    expect(sum(movements)).toBe(view.available);
    const books = await auditSku(db, sku);
    expect(booksViolations(books)).toEqual([]);
    expect(sum(movements)).toBe(books.totalStock - books.reserved - books.sold);
  });

  it('pages newest first with no gap or repeat while movements are written meanwhile', async () => {
    const sku = await create(1_000, 4);
    // Concurrent orders share their batch's statement, and so its instant: ties the keys must order.
    await Promise.all(Array.from({ length: 60 }, () => order(sku, 1)));
    await send('POST', `/skus/${sku}/restock`, { quantity: 5 });
    await Promise.all(Array.from({ length: 20 }, () => order(sku, 2, { holdSeconds: 600 })));
    const before = await history(sku, 'limit=100');
    expect(before).toHaveLength(82);

    const paged = await history(sku, 'limit=7', async (pages) => {
      if (pages % 3 === 0) {
        await Promise.all([order(sku, 1), order(sku, 1), send('POST', `/skus/${sku}/restock`, { quantity: 1 })]);
      }
    });
    const ids = paged.map((m) => m.id);
    expect(new Set(ids).size).toBe(ids.length);
    // The history as it was when paging began, each movement once and in its place; new ones on the first page only.
    const old = new Set(before.map((m) => m.id));
    expect(paged.filter((m) => old.has(m.id))).toEqual(before);
    expect(paged.slice(7).filter((m) => !old.has(m.id))).toEqual([]);
    expect(sum(await history(sku, 'limit=100'))).toBe((await send('GET', `/skus/${sku}`)).available);
  });

  it('filters by kind and by time', async () => {
    const sku = await create(50, 2);
    for (let i = 0; i < 6; i++) {
      const placed = await order(sku, 1, { holdSeconds: 600 });
      if (i % 2 === 0) await send('POST', `/orders/${placed.orderId}/cancel`);
      await send('POST', `/skus/${sku}/restock`, { quantity: 1 });
    }
    const all = await history(sku, 'limit=100');
    expect(all).toHaveLength(1 + 6 + 3 + 6);
    expect(await history(sku, 'kind=order&limit=2')).toEqual(all.filter((m) => m.kind === 'order'));
    expect(await history(sku, 'kind=cancel,restock&limit=4')).toEqual(
      all.filter((m) => m.kind === 'cancel' || m.kind === 'restock'),
    );
    expect(await history(sku, 'kind=expiry')).toEqual([]);

    const since = all[8]!.at;
    const until = all[3]!.at;
    const inWindow = all.filter((m) => m.at >= since && m.at < until);
    expect(inWindow.length).toBeGreaterThan(0);
    expect(await history(sku, `since=${since}&until=${until}&limit=2`)).toEqual(inWindow);
    expect(await history(sku, `since=${since}`)).toEqual(all.filter((m) => m.at >= since));
    expect(await history(sku, `until=${until}&kind=order`)).toEqual(
      all.filter((m) => m.at < until && m.kind === 'order'),
    );

    // A movement on a whole millisecond: \`since\` takes it in, \`until\` leaves it out.
    await sql`update stock_additions set created_at = date_trunc('milliseconds', created_at)
               where sku_id = (select id from skus where sku = ${sku}) and kind = 'create'`.execute(db);
    const created = (await history(sku, 'kind=create'))[0]!;
    expect((await history(sku, `since=${created.at}&kind=create,order`)).at(-1)).toEqual(created);
    expect(await history(sku, `until=${created.at}`)).toEqual([]);
  });

  it('refuses bad cursors, kinds, times and limits with 400, and unknown SKUs with 404', async () => {
    const sku = await create(5, 1);
    await order(sku, 1);
    const { nextCursor } = await page(sku, 'limit=1');
    expect(nextCursor).not.toBeNull();
    const decoded = Buffer.from(nextCursor!, 'base64url').toString();
    // The same bytes spelled otherwise: the last character's unused bits set.
    const alike = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_']
      .map((c) => nextCursor!.slice(0, -1) + c)
      .find((c) => c !== nextCursor && Buffer.from(c, 'base64url').toString() === decoded);
    expect(alike).toBeDefined();
    const bad = [
      'cursor=nonsense',
      `cursor=${Buffer.from('s:some-sku').toString('base64url')}`,
      `cursor=${Buffer.from(decoded.replace(/\.\d\./, '.7.')).toString('base64url')}`,
      `cursor=${Buffer.from(`${decoded}0`).toString('base64url')}`,
      `cursor=${alike!}`,
      'kind=sale',
      'kind=order,',
      'since=yesterday',
      'since=2026-12-01T00:00:00',
      'until=1999-12-31T23:59:59Z',
      'since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z',
      'limit=0',
      'limit=101',
      'limit=2.5',
      'colour=red',
    ];
    for (const query of bad) {
      const answer = await call(svc.url, 'GET', `/skus/${sku}/movements?${query}`, undefined, admin);
      expect(answer.status, query).toBe(400);
      expect(answer.body.code, query).toBe('bad_request');
    }
    const unknown = await call(svc.url, 'GET', `/skus/${uniqueSku('none')}/movements`, undefined, admin);
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('sku_not_found');
  });

  it('needs stock:admin: 401 without a credential, 403 with a key that lacks it', async () => {
    const sku = await create(5, 1);
    const anonymous = await call(svc.url, 'GET', `/skus/${sku}/movements`);
    expect(anonymous.status).toBe(401);
    const reader = await call(svc.url, 'GET', `/skus/${sku}/movements`, undefined, bearer(readerKey.key));
    expect(reader.status).toBe(403);
    expect(reader.body.code).toBe('forbidden');
    expect((await call(svc.url, 'GET', `/skus/${sku}`, undefined, bearer(readerKey.key))).status).toBe(200);
  });

  it('costs a page, not the history: a page deep in 20,000 orders reads about limit rows of each table', async () => {
    const sku = uniqueSku('long');
    const { id } = await db
      .insertInto('skus')
      .values({ sku, segment_count: 2, total_stock: 100_000 })
      .returning('id')
      .executeTakeFirstOrThrow();
    await sql`insert into stock_segments (sku_id, segment, layout_version, available)
              values (${id}, 0, 1, 40000), (${id}, 1, 1, 40000)`.execute(db);
    await sql`insert into stock_additions (sku_id, quantity, kind, reason, created_at)
              select ${id}, 1, 'restock', 'restock', now() - interval '1 day' + g * interval '1 second'
                from generate_series(1, 2000) g`.execute(db);
    // 20,000 orders, each from both segments, a tenth of them cancelled.
    await sql`
      with placed as (
        insert into orders (id, sku_id, quantity, status, created_at)
        select gen_random_uuid(), ${id}, 2, case when g % 10 = 0 then 'cancelled' else 'confirmed' end,
               now() - interval '1 day' + g * interval '3 seconds'
          from generate_series(1, 20000) g
        returning id, status, created_at
      ), taken as (
        insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token, created_at)
        select p.id, ${id}, s, 1, 1, 1, p.created_at from placed p, generate_series(0, 1) s
      )
      insert into stock_returns (order_id, sku_id, segment, layout_version, quantity, fence_token, reason, created_at)
      select p.id, ${id}, s, 1, 1, 1, 'cancelled', p.created_at + interval '1 second'
        from placed p, generate_series(0, 1) s where p.status = 'cancelled'`.execute(db);
    await sql`analyze stock_additions, stock_deductions, stock_returns, orders`.execute(db);

    let cursor: string | undefined;
    for (let pages = 0; pages < 50; pages++) {
      cursor = (await page(sku, `limit=20${cursor ? `&cursor=${cursor}` : ''}`)).nextCursor!;
    }
    const scans = await explainScans(db, movementsStatement(id, { limit: 20, cursor }).compile(db));
    // Each kind's rows come off its index in order, stopping at 21 movements: 2 rows an order or a return, and the
    // first row after the last one (which ends its group).
    expect(scans('stock_deductions').rowsRead).toBeLessThanOrEqual(22 * 2 + 2);
    expect(scans('stock_returns').rowsRead).toBeLessThanOrEqual(22 * 2 + 2);
    expect(scans('stock_additions').rowsRead).toBeLessThanOrEqual(4 * 21);
    expect(scans('orders').rowsRead).toBeLessThanOrEqual(20);
    for (const table of ['stock_deductions', 'stock_returns', 'stock_additions']) {
      expect(
        scans(table).scans.every((scan) => scan.startsWith('Index')),
        table,
      ).toBe(true);
    }
  });
});
