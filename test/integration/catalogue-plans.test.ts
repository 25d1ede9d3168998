import { randomUUID } from 'node:crypto';
import { CompiledQuery, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, runPrepared } from '../../src/db/database.js';
import { readOutbox } from '../../src/events/sequencer.js';
import { readSegmentStates } from '../../src/orders/batch-statements.js';
import { writeBatch } from '../../src/orders/order-writes.js';
import { availableBySku, readAvailableBySku } from '../../src/metrics/metrics.repository.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { explainScans } from '../support/query-plan.js';

const SKUS = 20_000;
const SEGMENTS = 4;

/**
 * Queries that run all the time whatever the traffic (the event sequencer about ten times a second on every busy
 * instance, the per-SKU gauge at every scrape and dashboard refresh) must read what follows from their answer, not
 * the whole catalogue. Run on a database of its own with a large catalogue, twice: as the planner sees it right after
 * the catalogue was loaded (no statistics yet: autovacuum analyses a table a minute or more later), then with fresh
 * statistics. A join of a whole table was what the planner picked in one case or the other.
 */
describe('queries that must not grow with the catalogue', () => {
  let own: OwnDatabase;
  const explain = (query: CompiledQuery) => explainScans(own.db, query);

  beforeAll(async () => {
    own = await createOwnDatabase('catalogue_plans');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    const { db } = own;
    await sql`
      insert into skus (sku, segment_count, total_stock)
      select 'sku-' || g, ${SEGMENTS}::int, 100 from generate_series(1, ${SKUS}::int) g`.execute(db);
    await sql`
      insert into stock_segments (sku_id, segment, layout_version, available)
      select k.id, s, k.layout_version, 25 + s from skus k, generate_series(0, ${SEGMENTS - 1}::int) s`.execute(db);
    await sql`
      insert into event_sku_state (sku_id, last_sequence, available, reserved, sold, low_stock_threshold)
      select id, 1, 100, 0, 0, null from skus`.execute(db);
    // More committed outbox rows than one run takes, spread over the catalogue.
    await sql`
      insert into event_outbox (sku_id, type, data, d_available, d_reserved, d_sold)
      select (g * 37) % ${SKUS}::int + 1, 'order.placed', '{"orders": [{"status": "confirmed", "quantity": 1}]}',
             -1, 0, 1
        from generate_series(1, 2000) g`.execute(db);
  });
  afterAll(() => own?.drop());

  /** The sequencer looks up each row's SKU and SKU state by key, reading as many of each as it moves rows. */
  const sequencerReadsByKey = async () => {
    const on = await explain(readOutbox().compile(own.db));
    expect(on('event_sku_state')).toEqual({ scans: ['Index Scan'], rowsRead: 500 });
    expect(on('skus')).toEqual({ scans: ['Index Scan'], rowsRead: 500 });
    // And the read answers what the plan promises: the oldest rows, each with its SKU and its state.
    const read = (await readOutbox().execute(own.db)).rows;
    expect(read).toHaveLength(500);
    expect(read[0]).toMatchObject({ sku_id: 38, sku: 'sku-38', last_sequence: 1, available: 100 });
  };

  /** The per-SKU gauge reads the newest SKUs by key, and the segments of those SKUs only. */
  const gaugeReadsNewestOnly = async () => {
    const on = await explain(availableBySku(own.db, 1000).compile());
    expect(on('stock_segments').rowsRead).toBe(1000 * SEGMENTS);
    expect(on('skus')).toEqual({ scans: ['Index Scan'], rowsRead: 1000 });
    const read = await readAvailableBySku(own.db, 1000);
    expect(read).toHaveLength(1000);
    // 25 + 26 + 27 + 28 units in each SKU's four segments.
    expect(read.slice(0, 2)).toEqual([
      { sku: `sku-${SKUS}`, available: 106 },
      { sku: `sku-${SKUS - 1}`, available: 106 },
    ]);
  };

  it('right after the catalogue is loaded, before any statistics', async () => {
    await sequencerReadsByKey();
    await gaugeReadsNewestOnly();
  });

  it('with fresh statistics', async () => {
    await sql`analyze`.execute(own.db);
    await sequencerReadsByKey();
    await gaugeReadsNewestOnly();
  });

  /**
   * The order path's statements run their generic plan, made once per connection. Left to choose, Postgres plans
   * them again for each call whenever a plan for the values at hand looks cheaper, and with the arrays of a one-order
   * batch against a large catalogue it does, for every call (past the first five, which it always plans for their
   * values): every quiet order would pay for planning its statements.
   */
  it('the order path plans its statements once per connection, not for each batch', async () => {
    const BATCHES = 12;
    const db = createDatabase(own.url, 1, 1);
    try {
      for (let skuId = 1; skuId <= BATCHES; skuId++) {
        const [state] = await readSegmentStates(db, [{ skuId, layoutVersion: 1, segment: 0 }]);
        const segment = { skuId, layoutVersion: 1, segment: 0, limitClaimed: false };
        const { fence, available } = state!;
        const order = { orderId: randomUUID(), idempotencyKey: null, requestFingerprint: null, customerId: null };
        const { placed } = await writeBatch(db, {
          segments: [{ ...segment, availableSeen: available, fenceSeen: fence, fence: fence + 1 }],
          orders: [{ ...order, holdSeconds: null, skuId, takes: [{ segment: 0, quantity: 1 }], limitedSkuIds: [] }],
        });
        expect(placed.size).toBe(1);
      }
      // On the one connection of the order path's pool, the same one the statements ran on.
      const plans = await runPrepared<{ name: string; generic_plans: number; custom_plans: number }>(
        db,
        {
          name: 'plans_made',
          text: `select name, generic_plans::int, custom_plans::int from pg_prepared_statements
                  where name <> 'plans_made' order by name`,
        },
        [],
      );
      expect(plans).toEqual([
        { name: 'read_segments', generic_plans: BATCHES, custom_plans: 0 },
        { name: 'write_batch', generic_plans: BATCHES, custom_plans: 0 },
      ]);
    } finally {
      await db.destroy();
    }
  });
});
