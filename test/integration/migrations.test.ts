import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditStock } from '../support/invariants.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';

/** A database of its own on the test Postgres, migrated step by step with the compiled migrations. */
describe('migrations', () => {
  let own: OwnDatabase;
  let db: OwnDatabase['db'];
  let migrator: OwnDatabase['migrator'];

  beforeAll(async () => {
    own = await createOwnDatabase('migrations');
    ({ db, migrator } = own);
  });
  afterAll(() => own?.drop());

  it('seeds the running totals of units sold from the ledger, across layouts', async () => {
    const before = await migrator.migrateTo('20261123000000_distributed_locks');
    expect(before.error).toBeUndefined();
    // A SKU that sold 3 + 4 units from two segments of layout 1, was re-segmented, then sold 5 from layout 2.
    await sql`insert into skus (id, sku, segment_count, layout_version, total_stock) values (1, 'old', 2, 2, 20)`.execute(
      db,
    );
    await sql`insert into stock_additions (sku_id, quantity, reason) values (1, 20, 'create')`.execute(db);
    await sql`insert into stock_segments (sku_id, segment, layout_version, available) values (1, 0, 2, 4), (1, 1, 2, 4)`.execute(
      db,
    );
    const orders = [
      ['00000000-0000-0000-0000-000000000001', 1, 0, 3],
      ['00000000-0000-0000-0000-000000000002', 1, 1, 4],
      ['00000000-0000-0000-0000-000000000003', 2, 1, 5],
    ] as const;
    for (const [id, layout, segment, quantity] of orders) {
      await sql`insert into orders (id, sku_id, quantity) values (${id}::uuid, 1, ${quantity})`.execute(db);
      await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
                values (${id}::uuid, 1, ${segment}, ${layout}, ${quantity}, 1)`.execute(db);
    }

    const after = await migrator.migrateToLatest();
    expect(after.error).toBeUndefined();
    const { rows: segments } = await sql<{ segment: number; sold: string }>`
      select segment, sold from stock_segments where sku_id = 1 order by segment`.execute(db);
    expect(segments.map((s) => Number(s.sold))).toEqual([0, 5]);
    const audit = await auditStock(db, 'old');
    expect(audit).toMatchObject({ sold: 12, soldCounted: 12, available: 8, totalStock: 20 });
  });

  it('moves confirmations counted apart back onto the running totals when rolled back', async () => {
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    // Two confirmed reservations: 3 units from segment 0 of the current layout (2), 2 from a replaced layout (1).
    await sql`insert into skus (id, sku, segment_count, layout_version, total_stock, reserved_in_earlier_layouts)
              values (2, 'counted', 2, 2, 10, 2)`.execute(db);
    await sql`insert into stock_segments (sku_id, segment, layout_version, available, reserved)
              values (2, 0, 2, 2, 3), (2, 1, 2, 3, 0)`.execute(db);
    const orders = [
      ['00000000-0000-0000-0000-000000000011', 2, 0, 3, 5],
      ['00000000-0000-0000-0000-000000000012', 1, 1, 2, 7],
    ] as const;
    for (const [id, layout, segment, quantity, slot] of orders) {
      await sql`insert into orders (id, sku_id, quantity, status, expires_at, confirmed_slot)
                values (${id}::uuid, 2, ${quantity}, 'confirmed', now(), ${slot})`.execute(db);
      await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
                values (${id}::uuid, 2, ${segment}, ${layout}, ${quantity}, 1)`.execute(db);
      await sql`insert into reservation_confirmations (sku_id, slot, units) values (2, ${slot}, ${quantity})`.execute(
        db,
      );
    }
    expect(await auditStock(db, 'counted')).toMatchObject({ sold: 5, soldCounted: 5, reserved: 0, reservedCounted: 0 });

    // Down to the migration before it, through every later one.
    const down = await migrator.migrateTo('20261126000000_order_lifecycle');
    expect(down.error).toBeUndefined();
    expect(down.results?.at(-1)?.migrationName).toBe('20261127000000_reservation_confirmations');
    const { rows: segments } = await sql<{ reserved: string; sold: string }>`
      select reserved, sold from stock_segments where sku_id = 2 order by segment`.execute(db);
    expect(segments.map((s) => [Number(s.reserved), Number(s.sold)])).toEqual([
      [0, 3],
      [0, 0],
    ]);
    const { rows: sku } = await sql<{ reserved: string; sold: string }>`
      select reserved_in_earlier_layouts as reserved, sold_in_earlier_layouts as sold from skus where id = 2`.execute(
      db,
    );
    expect(sku.map((k) => [Number(k.reserved), Number(k.sold)])).toEqual([[0, 2]]);
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
  });
  it("dates each order's ledger rows by their order and names every addition's kind, for the movement history", async () => {
    expect((await migrator.migrateTo('20261209020000_audit_sweep_pace')).error).toBeUndefined();
    await sql`insert into skus (id, sku, segment_count, total_stock) values (3, 'dated', 2, 10)`.execute(db);
    // A row of a writer that predates the kind column.
    await sql`insert into stock_additions (sku_id, quantity, reason) values (3, 10, 'create')`.execute(db);
    const id = '00000000-0000-0000-0000-000000000021';
    await sql`insert into orders (id, sku_id, quantity, created_at)
              values (${id}::uuid, 3, 2, '2026-11-30T12:00:00.123456Z')`.execute(db);
    await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
              values (${id}::uuid, 3, 0, 1, 1, 1), (${id}::uuid, 3, 1, 1, 1, 1)`.execute(db);

    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    const { rows: taken } = await sql<{ same: boolean }>`
      select d.created_at = o.created_at as same from stock_deductions d join orders o on o.id = d.order_id
       where d.order_id = ${id}::uuid`.execute(db);
    expect(taken).toEqual([{ same: true }, { same: true }]);
    const { rows: kinds } = await sql<{ kind: string }>`select kind from stock_additions where sku_id = 3`.execute(db);
    expect(kinds).toEqual([{ kind: 'create' }]);
    // New ledger rows are dated by their statement.
    await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
              values ('00000000-0000-0000-0000-000000000022', 3, 0, 1, 1, 1)`.execute(db);
    const { rows: fresh } = await sql<{ recent: boolean }>`
      select created_at > now() - interval '1 minute' as recent from stock_deductions
       where order_id = '00000000-0000-0000-0000-000000000022'`.execute(db);
    expect(fresh).toEqual([{ recent: true }]);
  });

  it('keeps a movement history column and indexes built beforehand, as docs/operations.md has a large ledger do', async () => {
    expect((await migrator.migrateTo('20261209020000_audit_sweep_pace')).error).toBeUndefined();
    await sql`insert into skus (id, sku, segment_count, total_stock) values (4, 'prepared', 1, 10)`.execute(db);
    const dated = '00000000-0000-0000-0000-000000000031';
    const later = '00000000-0000-0000-0000-000000000032';
    for (const [id, at] of [
      [dated, '2026-11-30T12:00:00.123456Z'],
      [later, '2026-11-30T13:00:00.654321Z'],
    ] as const) {
      await sql`insert into orders (id, sku_id, quantity, created_at) values (${id}::uuid, 4, 1, ${at})`.execute(db);
    }
    await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
              values (${dated}::uuid, 4, 0, 1, 1, 1)`.execute(db);
    // The upgrade's online steps (docs/operations.md, The movement history), each its own statement.
    for (const step of [
      sql`alter table stock_deductions add column if not exists created_at timestamptz`,
      sql`alter table stock_deductions alter column created_at set default now()`,
      sql`update stock_deductions d set created_at = o.created_at from orders o
           where o.id = d.order_id and d.created_at is null`,
      sql`create index concurrently if not exists stock_additions_history_idx
            on stock_additions (sku_id, kind, created_at, id) include (quantity)`,
      sql`create index concurrently if not exists stock_deductions_history_idx
            on stock_deductions (sku_id, created_at, order_id) include (quantity)`,
      sql`create index concurrently if not exists stock_returns_history_idx
            on stock_returns (sku_id, reason, created_at, order_id) include (quantity)`,
    ]) {
      await step.execute(db);
    }
    const indexes = async () =>
      (
        await sql<{ name: string; oid: number }>`
          select indexrelid::regclass::text as name, indexrelid::int as oid from pg_index
           where indexrelid::regclass::text like '%history_idx' order by 1`.execute(db)
      ).rows;
    const built = await indexes();
    expect(built.map((index) => index.name)).toEqual([
      'stock_additions_history_idx',
      'stock_deductions_history_idx',
      'stock_returns_history_idx',
    ]);
    // A ledger row still undated when the migration runs: written before the column had its default.
    await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token, created_at)
              values (${later}::uuid, 4, 0, 1, 1, 2, null)`.execute(db);

    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    expect(await indexes()).toEqual(built);
    const { rows: taken } = await sql<{ same: boolean }>`
      select d.created_at = o.created_at as same from stock_deductions d join orders o on o.id = d.order_id
       where d.sku_id = 4 order by d.order_id`.execute(db);
    expect(taken).toEqual([{ same: true }, { same: true }]);
  });
});
