import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Sale windows: a SKU may be ordered only from `sale_starts_at` (inclusive) until `sale_ends_at` (exclusive); null
 * leaves that side open. Instances compare them with one shared clock, never their own. `sale_start_announced` and
 * `sale_end_announced` hold the instants whose `sku.sale_opened` / `sku.sale_closed` event was written, so each is
 * written once, whichever instance gets there; the partial indexes find the edges still to announce.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('skus')
    .addColumn('sale_starts_at', 'timestamptz')
    .addColumn('sale_ends_at', 'timestamptz')
    .addColumn('sale_start_announced', 'timestamptz')
    .addColumn('sale_end_announced', 'timestamptz')
    .execute();
  await sql`alter table skus add constraint skus_sale_window_check
    check (sale_starts_at is null or sale_ends_at is null or sale_ends_at > sale_starts_at)`.execute(db);
  await sql`create index skus_sale_start_due_idx on skus (sale_starts_at)
    where sale_start_announced is distinct from sale_starts_at`.execute(db);
  await sql`create index skus_sale_end_due_idx on skus (sale_ends_at)
    where sale_end_announced is distinct from sale_ends_at`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table skus drop constraint if exists skus_sale_window_check`.execute(db);
  await sql`drop index if exists skus_sale_start_due_idx`.execute(db);
  await sql`drop index if exists skus_sale_end_due_idx`.execute(db);
  await db.schema
    .alterTable('skus')
    .dropColumn('sale_starts_at')
    .dropColumn('sale_ends_at')
    .dropColumn('sale_start_announced')
    .dropColumn('sale_end_announced')
    .execute();
}
