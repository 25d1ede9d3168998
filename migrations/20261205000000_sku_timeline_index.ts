import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * The sale's timeline on the dashboard: a SKU's `sku.*` events (created, restocked, re-segmented, sale edges, low
 * stock, sold out, back in stock), newest first. A partial index holds those alone, so reading them skips the SKU's
 * order events however many a sale wrote, and an order event adds no entry to it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index events_sku_timeline_idx on events (sku, position) where type like 'sku.%'`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index events_sku_timeline_idx`.execute(db);
}
