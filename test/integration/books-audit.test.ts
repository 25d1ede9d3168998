import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BooksAudit, DEFAULT_AUDIT_BOUNDS } from '../../src/audit/books-audit.js';
import { booksStatement, recentBooksStatement } from '../../src/audit/books.js';
import { createDatabase, type Db } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { MetricsSnapshot } from '../support/scrape-metric.js';
import { explainScans } from '../support/query-plan.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const ADMIN_TOKEN = `adm-${randomBytes(12).toString('hex')}`;
const METRICS_TOKEN = `met-${randomBytes(12).toString('hex')}`;
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** The bound the audit promises for a row changed by hand, with its default interval and a small catalogue. */
const REPORTED_WITHIN_MS = 10_000;

const skuIdOf = async (db: Db, sku: string) =>
  (await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow()).id;

describe('the books audit, as the service runs it', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  const audit = async () => {
    const answer = await call(svc.url, 'GET', '/audit', undefined, bearer(ADMIN_TOKEN));
    expect(answer.status).toBe(200);
    return answer.body;
  };
  const unbalancedGauge = async () =>
    (await MetricsSnapshot.scrape(`${svc.url}/metrics`, METRICS_TOKEN)).sum('stock_books_unbalanced_skus');

  beforeAll(async () => {
    // A database of its own: its catalogue is this test's, so a full pass is one pass.
    own = await createOwnDatabase('books_audit');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    // The default interval: what an operator gets.
    svc = await startService({ DATABASE_URL: own.url, ADMIN_TOKEN, METRICS_TOKEN });
  });
  afterAll(async () => {
    await svc?.stop();
    await own?.drop();
  });

  it('reports a balanced book as balanced, then a segment row corrupted in Postgres within 10 s, then its repair', async () => {
    const sku = uniqueSku('audited');
    const admin = bearer(ADMIN_TOKEN);
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 40, segments: 4 }, admin)).status).toBe(201);
    for (let i = 0; i < 5; i++)
      expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 2 }, admin)).status).toBe(201);
    const ordered = (await audit()).at as string;

    // A full pass that began after the orders: every SKU's books read since, none off.
    const sweptAfterOrders = async () => {
      const report = await audit();
      return report.lastFullPass !== null && report.lastFullPass.startedAt > ordered ? report : undefined;
    };
    expect(await waitFor(async () => (await sweptAfterOrders()) !== undefined, REPORTED_WITHIN_MS)).toBeLessThan(
      REPORTED_WITHIN_MS,
    );
    const balanced = (await sweptAfterOrders())!;
    expect(balanced).toMatchObject({ balanced: true, unbalancedCount: 0, unbalanced: [] });
    expect(balanced.lastPassAt >= balanced.lastFullPass.finishedAt).toBe(true);
    expect(await unbalancedGauge()).toBe(0);

    // One unit appears in a segment from nowhere, written straight into Postgres: no event announces it.
    const skuId = await skuIdOf(own.db, sku);
    await sql`update stock_segments set available = available + 1 where sku_id = ${skuId} and segment = 0`.execute(
      own.db,
    );
    const reportedIn = await waitFor(async () => (await audit()).unbalancedCount === 1, REPORTED_WITHIN_MS);
    expect(reportedIn).toBeLessThan(REPORTED_WITHIN_MS);
    const report = await audit();
    expect(report.balanced).toBe(false);
    expect(report.unbalanced).toEqual([
      {
        sku,
        problems: [{ check: 'units_add_up', detail: 'available 31 + reserved 0 + sold 10 = 41 ≠ stock 40' }],
        books: expect.objectContaining({ totalStock: 40, available: 31, sold: 10, reserved: 0 }),
        foundAt: expect.any(String),
        checkedAt: expect.any(String),
      },
    ]);
    // Every instance's gauge reads the same findings.
    expect(await unbalancedGauge()).toBe(1);

    await sql`update stock_segments set available = available - 1 where sku_id = ${skuId} and segment = 0`.execute(
      own.db,
    );
    expect(await waitFor(async () => (await audit()).balanced === true, REPORTED_WITHIN_MS)).toBeLessThan(
      REPORTED_WITHIN_MS,
    );
    expect(await unbalancedGauge()).toBe(0);
  });

  it('answers admins only: 401 without a credential, 403 to the metrics token, 405 to anything but GET', async () => {
    const none = await call(svc.url, 'GET', '/audit');
    expect(none.status).toBe(401);
    expect(none.body.code).toBe('unauthorized');
    const monitoring = await call(svc.url, 'GET', '/audit', undefined, bearer(METRICS_TOKEN));
    expect(monitoring.status).toBe(403);
    expect(monitoring.body.code).toBe('forbidden');
    const post = await call(svc.url, 'POST', '/audit', {}, bearer(ADMIN_TOKEN));
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET');
  });
});

describe('two auditors', () => {
  let own: OwnDatabase;
  let svc: RunningService;
  let first: Db;
  let second: Db;
  const log = createLogger('silent');
  // Two SKUs a sweep's slice, with no rest between slices (the rest has a test of its own).
  const bounds = { ...DEFAULT_AUDIT_BOUNDS, sweepSkus: 2, sweepShare: 1, changedSkus: 10, feedEvents: 1000 };

  beforeAll(async () => {
    own = await createOwnDatabase('books_auditors');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    // The service only to write through (its own audit off): the two auditors below run the passes.
    svc = await startService({ DATABASE_URL: own.url, AUDIT_INTERVAL_MS: '0', EVENTS_POLL_MS: '20' });
    first = createDatabase(own.url, 2);
    second = createDatabase(own.url, 2);
  });
  afterAll(async () => {
    await svc?.stop();
    await first?.destroy();
    await second?.destroy();
    await own?.drop();
  });

  it('audit one at a time: while one pass runs, the other instance skips its turn instead of auditing too', async () => {
    const a = new BooksAudit(first, 0, log, bounds);
    const b = new BooksAudit(second, 0, log, bounds);
    const sku = uniqueSku('contested');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
    const skuId = await skuIdOf(own.db, sku);
    await sql`update skus set total_stock = 11 where id = ${skuId}`.execute(own.db);
    while (!(await own.db.selectFrom('audit_findings').select('sku_id').executeTakeFirst()))
      expect((await a.runPass()).ran).toBe(true);

    // Hold the SKU's finding row: auditor a's next pass stops there, in the middle of its pass.
    const holder = createDatabase(own.url, 1);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    try {
      const holding = holder.transaction().execute(async (trx) => {
        await sql`select 1 from audit_findings where sku_id = ${skuId} for update`.execute(trx);
        await held;
      });
      await sleep(100);
      let aDone = false;
      // With one SKU every pass is a full pass: it checks the SKU again, and waits for its finding's row.
      const aPass = a.runPass().finally(() => (aDone = true));
      await waitFor(async () => {
        const { rows } = await sql<{ n: number }>`
          select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`.execute(
          own.db,
        );
        return rows[0]!.n > 0 || aDone;
      }, 5_000);
      expect(aDone).toBe(false);
      // b answers at once that it skipped: it neither audits nor waits for a's turn to end.
      const bTurn = await Promise.race([b.runPass(), sleep(2_000).then(() => 'still waiting for the lock')]);
      expect(bTurn).toEqual({ ran: false });
      release();
      await holding;
      expect(await aPass).toMatchObject({ ran: true });
      // Once a is done, b audits.
      expect(await b.runPass()).toMatchObject({ ran: true });
    } finally {
      release();
      await holder.destroy();
    }
  });

  it('each pass checks the SKUs changed since the last one, wherever the sweep is', async () => {
    const a = new BooksAudit(first, 0, log, bounds);
    const skus = Array.from({ length: 6 }, (_, i) => uniqueSku(`changed${i}`));
    for (const sku of skus)
      expect((await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
    // Passes until the feed is read up to now and the sweep is at its start.
    await waitFor(
      async () => (await svc.service.db.selectFrom('event_outbox').select('id').executeTakeFirst()) === undefined,
      5_000,
    );
    for (let done = false; !done;) {
      const pass = await a.runPass();
      done = pass.ran && pass.fullPass;
    }
    await a.runPass();
    // The last SKU is far from the sweep (2 SKUs a pass, from the first): corrupted, then changed through the service.
    const last = skus.at(-1)!;
    await sql`update skus set total_stock = total_stock + 1 where sku = ${last}`.execute(own.db);
    expect((await call(svc.url, 'POST', '/orders', { sku: last, quantity: 1 })).status).toBe(201);
    await waitFor(
      async () => (await svc.service.db.selectFrom('event_outbox').select('id').executeTakeFirst()) === undefined,
      5_000,
    );
    expect(await a.runPass()).toMatchObject({ ran: true, fullPass: false });
    const found = await own.db.selectFrom('audit_findings').select('sku').execute();
    expect(found.map((row) => row.sku)).toContain(last);
  });

  const feedRead = () =>
    waitFor(
      async () => (await svc.service.db.selectFrom('event_outbox').select('id').executeTakeFirst()) === undefined,
      5_000,
    );
  const auditState = () => own.db.selectFrom('audit_state').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();

  it('the sweep rests to keep to its share of the time, while changed SKUs are still checked', async () => {
    // One SKU a slice (any time spent ends it), and a share of 0.1 %: a rest of 999 × the slice's time.
    const paced = new BooksAudit(first, 0, log, { ...bounds, sweepSkus: 100, sweepSliceMs: 0, sweepShare: 0.001 });
    for (const i of [0, 1, 2])
      expect(
        (await call(svc.url, 'POST', '/skus', { sku: uniqueSku(`paced${i}`), stock: 5, segments: 1 })).status,
      ).toBe(201);
    await feedRead();
    await sql`update audit_state set sweep_due_at = null`.execute(own.db);
    expect(await paced.runPass()).toMatchObject({ ran: true });
    const sliced = await auditState();
    expect(sliced.sweep_due_at!.getTime()).toBeGreaterThan(sliced.last_pass_at!.getTime());

    // A SKU changed meanwhile, its stock corrupted: the next pass checks it, and leaves the sweep where it was.
    const sku = uniqueSku('changed-while-resting');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1 })).status).toBe(201);
    await sql`update skus set total_stock = total_stock + 1 where sku = ${sku}`.execute(own.db);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1 })).status).toBe(201);
    await feedRead();
    expect(await paced.runPass()).toMatchObject({ ran: true, fullPass: false });
    const found = await own.db
      .selectFrom('audit_findings')
      .select(['sku', 'problems'])
      .where('sku', '=', sku)
      .execute();
    expect(found).toEqual([{ sku, problems: [expect.objectContaining({ check: 'units_add_up' })] }]);
    const rested = await auditState();
    expect(rested.sweep_after).toBe(sliced.sweep_after);
    expect(rested.sweep_due_at).toEqual(sliced.sweep_due_at);

    // Once the rest is over, the sweep goes on from there.
    await sql`update audit_state set sweep_due_at = now() - interval '1 second'`.execute(own.db);
    await paced.runPass();
    expect((await auditState()).sweep_after).toBeGreaterThan(sliced.sweep_after);
  });

  it("a check of recent changes adds to a SKU's finding and leaves clearing it to a whole check", async () => {
    const a = new BooksAudit(first, 0, log, bounds);
    const sku = uniqueSku('ledger-off');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
    const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 });
    expect(placed.status).toBe(201);
    // The order's ledger row says 2 units: only its whole books show it (the counters still add up).
    await sql`update stock_deductions set quantity = 2 where order_id = ${placed.body.orderId}`.execute(own.db);
    await feedRead();
    const problemsOf = async () =>
      (
        (await own.db.selectFrom('audit_findings').select('problems').where('sku', '=', sku).executeTakeFirst())
          ?.problems as { check: string }[] | undefined
      )?.map((problem) => problem.check);
    await sql`update audit_state set sweep_due_at = null`.execute(own.db);
    for (let done = false; !done;) {
      const pass = await a.runPass();
      done = pass.ran && pass.fullPass;
    }
    const whole = await problemsOf();
    expect(whole).toContain('orders_match_ledger');

    // Another order: its recent check finds nothing, with the sweep resting. The finding stays as the sweep left it.
    await sql`update audit_state set sweep_due_at = now() + interval '1 hour'`.execute(own.db);
    expect((await call(svc.url, 'POST', '/orders', { sku, quantity: 1 })).status).toBe(201);
    await feedRead();
    expect(await a.runPass()).toMatchObject({ ran: true, fullPass: false });
    expect(await problemsOf()).toEqual(whole);

    // Put right, the next whole check clears it.
    await sql`update stock_deductions set quantity = 1 where order_id = ${placed.body.orderId}`.execute(own.db);
    await sql`update audit_state set sweep_due_at = null`.execute(own.db);
    for (let done = false; !done;) {
      const pass = await a.runPass();
      done = pass.ran && pass.fullPass;
    }
    expect(await problemsOf()).toBeUndefined();
  });
});

describe("a SKU's books read that SKU's rows only", () => {
  let own: OwnDatabase;
  beforeAll(async () => {
    own = await createOwnDatabase('books_plan');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
  });
  afterAll(() => own?.drop());

  it("checking one SKU reads none of the other SKUs' orders", async () => {
    const { db } = own;
    // Two SKUs: one with 20,000 orders of history, one with 3.
    await sql`insert into skus (sku, segment_count, total_stock) values ('busy', 1, 100000), ('quiet', 1, 100)`.execute(
      db,
    );
    await sql`insert into stock_segments (sku_id, segment, layout_version, available, sold)
              select id, 0, 1, case sku when 'busy' then 80000 else 97 end, case sku when 'busy' then 20000 else 3 end
                from skus`.execute(db);
    await sql`insert into stock_additions (sku_id, quantity, reason)
              select id, total_stock, 'create' from skus`.execute(db);
    await sql`
      with placed as (
        insert into orders (id, sku_id, quantity, status)
        select gen_random_uuid(), s.id, 1, 'confirmed'
          from skus s, generate_series(1, case s.sku when 'busy' then 20000 else 3 end)
        returning id, sku_id)
      insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
      select id, sku_id, 0, 1, 1, 1 from placed`.execute(db);
    await sql`analyze`.execute(db);
    const quietId = await skuIdOf(db, 'quiet');
    // Every SKU in one slice: the sweep's pace has a test of its own.
    const wholeSweep = { ...DEFAULT_AUDIT_BOUNDS, sweepSliceMs: 60_000, sweepShare: 1 };
    const audit = new BooksAudit(db, 0, createLogger('silent'), wholeSweep);
    expect(await audit.runPass()).toMatchObject({ ran: true, fullPass: true });
    expect(await db.selectFrom('audit_findings').selectAll().execute()).toEqual([]);

    const statement = booksStatement(quietId).compile(db);
    const scansOf = await explainScans(db, statement);
    const rowsRead = (table: string) => scansOf(table).rowsRead;
    // Its three orders and their three ledger rows, each looked at by the few subqueries that read them.
    expect(rowsRead('orders')).toBeLessThanOrEqual(3 * 2);
    expect(rowsRead('stock_deductions')).toBeLessThanOrEqual(3 * 2);

    // The busy SKU's recent books, three of its orders named: those orders' rows, not its 20,000 of history.
    const busyId = await skuIdOf(db, 'busy');
    const named = await db.selectFrom('orders').select('id').where('sku_id', '=', busyId).limit(3).execute();
    const recent = recentBooksStatement(
      new Map([
        [busyId, named.map((row) => row.id)],
        [quietId, []],
      ]),
    ).compile(db);
    const recentScans = await explainScans(db, recent);
    expect(recentScans('orders').rowsRead).toBeLessThanOrEqual(3 * 2);
    expect(recentScans('stock_deductions').rowsRead).toBeLessThanOrEqual(3 * 2);
    const { rows } = await db.executeQuery<Record<string, unknown>>(recent);
    expect(rows).toEqual([
      expect.objectContaining({ skuId: busyId, recentOrders: 3, ordersLedgerMismatch: 0 }),
      expect.objectContaining({ skuId: quietId, recentOrders: 0 }),
    ]);
  });
});
