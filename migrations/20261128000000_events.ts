import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Stock and order events (docs/events.md).
 *
 * - `event_outbox`: what each change writes in its own transaction (the order statement, a confirm, a return, an
 *   admin change): the SKU, the type, the change's details and what it did to the SKU's available, reserved and sold.
 *   `xid` is the writing transaction's id, so the sequencer can take rows in an order no later commit can precede.
 *   Rows live here only until the sequencer has moved them into `events`.
 * - `events`: the feed. `position` (the cursor) and each SKU's `sequence` are given by the one sequencer at a time,
 *   with the SKU's totals after the event.
 * - `event_sku_state`: per SKU, the last sequence given and the totals after it; seeded here from the books of the
 *   SKUs that exist already, so their first event carries the right totals.
 * - `event_sequencer`: one row holding the last position given and the last outbox row moved; whoever holds its row
 *   lock is the sequencer.
 * - `webhooks`, `webhook_deliveries`: registered endpoints with their place in the feed, and every delivery attempt.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('skus')
    .addColumn('low_stock_threshold', 'bigint', (c) => c.check(sql`low_stock_threshold >= 0`))
    .execute();

  await db.schema
    .createTable('event_outbox')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('xid', sql`xid8`, (c) => c.notNull().defaultTo(sql`pg_current_xact_id()`))
    .addColumn('sku_id', 'integer', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('data', 'jsonb', (c) => c.notNull())
    .addColumn('d_available', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('d_reserved', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('d_sold', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('occurred_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create index event_outbox_xid_idx on event_outbox (xid, id)`.execute(db);

  await db.schema
    .createTable('events')
    .addColumn('position', 'bigint', (c) => c.primaryKey())
    .addColumn('sku_id', 'integer', (c) => c.notNull())
    .addColumn('sku', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('sequence', 'bigint', (c) => c.notNull())
    .addColumn('occurred_at', 'timestamptz', (c) => c.notNull())
    .addColumn('data', 'jsonb', (c) => c.notNull())
    .addUniqueConstraint('events_sku_sequence_key', ['sku_id', 'sequence'])
    .execute();
  // The feed filtered by SKU, and retention's oldest-first deletes.
  await sql`create index events_sku_idx on events (sku, position)`.execute(db);
  await sql`create index events_occurred_at_idx on events (occurred_at)`.execute(db);

  await db.schema
    .createTable('event_sku_state')
    .addColumn('sku_id', 'integer', (c) => c.primaryKey())
    .addColumn('last_sequence', 'bigint', (c) => c.notNull())
    .addColumn('available', 'bigint', (c) => c.notNull())
    .addColumn('reserved', 'bigint', (c) => c.notNull())
    .addColumn('sold', 'bigint', (c) => c.notNull())
    .addColumn('low_stock_threshold', 'bigint')
    .execute();
  await sql`
    insert into event_sku_state (sku_id, last_sequence, available, reserved, sold, low_stock_threshold)
    select k.id, 0,
           coalesce((select sum(available) from stock_segments s where s.sku_id = k.id), 0),
           k.reserved_in_earlier_layouts + coalesce((select sum(reserved) from stock_segments s where s.sku_id = k.id), 0)
             - coalesce((select sum(units) from reservation_confirmations c where c.sku_id = k.id), 0),
           k.sold_in_earlier_layouts + coalesce((select sum(sold) from stock_segments s where s.sku_id = k.id), 0)
             + coalesce((select sum(units) from reservation_confirmations c where c.sku_id = k.id), 0),
           null
      from skus k`.execute(db);

  await db.schema
    .createTable('event_sequencer')
    .addColumn('id', 'smallint', (c) => c.primaryKey().check(sql`id = 1`))
    .addColumn('last_position', 'bigint', (c) => c.notNull())
    // The (xid, id) of the last outbox row moved: the next run reads on from there, not through the deleted ones.
    .addColumn('last_xid', sql`xid8`, (c) => c.notNull().defaultTo(sql`'0'::xid8`))
    .addColumn('last_id', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  await sql`insert into event_sequencer (id, last_position) values (1, 0)`.execute(db);

  await db.schema
    .createTable('webhooks')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('types', sql`text[]`, (c) => c.notNull())
    .addColumn('skus', sql`text[]`)
    .addColumn('secret', 'text', (c) => c.notNull())
    .addColumn('enabled', 'boolean', (c) => c.notNull().defaultTo(true))
    // Every event at or before this position was delivered (or given up on).
    .addColumn('cursor', 'bigint', (c) => c.notNull())
    // The next event's failed attempts so far, since when it fails, and when it may be tried again.
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('failing_since', 'timestamptz')
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('webhook_deliveries')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('webhook_id', 'uuid', (c) => c.notNull().references('webhooks.id').onDelete('cascade'))
    .addColumn('event_id', 'bigint', (c) => c.notNull())
    .addColumn('attempt', 'integer', (c) => c.notNull())
    .addColumn('outcome', 'text', (c) => c.notNull().check(sql`outcome in ('delivered', 'retrying', 'failed')`))
    .addColumn('response_status', 'integer')
    .addColumn('error', 'text')
    .addColumn('attempted_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create index webhook_deliveries_webhook_idx on webhook_deliveries (webhook_id, id desc)`.execute(db);
  await sql`create index webhook_deliveries_attempted_at_idx on webhook_deliveries (attempted_at)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of [
    'webhook_deliveries',
    'webhooks',
    'event_sequencer',
    'event_sku_state',
    'events',
    'event_outbox',
  ]) {
    await db.schema.dropTable(table).execute();
  }
  await db.schema.alterTable('skus').dropColumn('low_stock_threshold').execute();
}
