import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Sale windows: a SKU may be ordered only from `sale_starts_at` (inclusive) until `sale_ends_at` (exclusive); null
 * leaves that side open. Instances compare them with one shared clock, never their own.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('skus')
    .addColumn('sale_starts_at', 'timestamptz')
    .addColumn('sale_ends_at', 'timestamptz')
    .execute();
  await sql`alter table skus add constraint skus_sale_window_check
    check (sale_starts_at is null or sale_ends_at is null or sale_ends_at > sale_starts_at)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table skus drop constraint if exists skus_sale_window_check`.execute(db);
  await db.schema.alterTable('skus').dropColumn('sale_starts_at').dropColumn('sale_ends_at').execute();
}
