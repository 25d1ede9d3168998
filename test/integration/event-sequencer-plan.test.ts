import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readOutbox } from '../../src/events/sequencer.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';

const SKUS = 20_000;

/** A node of a plan as `explain (format json)` gives it. */
interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

/**
 * The sequencer runs about ten times a second on every busy instance: what one run reads must follow from the rows
 * it moves, not from the size of the catalogue. Planned on a database of its own, with a large catalogue and fresh
 * statistics, where a scan of every SKU's state is what the planner would otherwise pick.
 */
describe("the sequencer's read", () => {
  let own: OwnDatabase;

  beforeAll(async () => {
    own = await createOwnDatabase('sequencer_plan');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    const { db } = own;
    await sql`
      insert into skus (sku, segment_count, total_stock)
      select 'sku-' || g, 1, 100 from generate_series(1, ${SKUS}::int) g`.execute(db);
    await sql`
      insert into event_sku_state (sku_id, last_sequence, available, reserved, sold, low_stock_threshold)
      select id, 1, 100, 0, 0, null from skus`.execute(db);
    // A full run's worth of committed outbox rows, spread over the catalogue.
    await sql`
      insert into event_outbox (sku_id, type, data, d_available, d_reserved, d_sold)
      select (g * 37) % ${SKUS}::int + 1, 'order.placed', '{"orders": [{"status": "confirmed", "quantity": 1}]}',
             -1, 0, 1
        from generate_series(1, 2000) g`.execute(db);
    await sql`analyze`.execute(db);
  });
  afterAll(() => own?.drop());

  it("looks up each row's SKU and SKU state by key instead of scanning either table", async () => {
    const { rows } = await sql<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>`explain (format json) ${readOutbox()}`.execute(
      own.db,
    );
    const nodes = nodesOf(rows[0]!['QUERY PLAN'][0].Plan);
    const on = (table: string) => nodes.filter((n) => n['Relation Name'] === table).map((n) => n['Node Type']);
    expect(on('event_sku_state')).toEqual(['Index Scan']);
    expect(on('skus')).toEqual(['Index Scan']);

    // And the read answers what the plan promises: the oldest rows, each with its SKU and its state.
    const read = (await readOutbox().execute(own.db)).rows;
    expect(read).toHaveLength(500);
    expect(read[0]).toMatchObject({ sku_id: 38, sku: 'sku-38', last_sequence: 1, available: 100 });
  });
});
