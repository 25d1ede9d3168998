import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * `GET /skus` pages through SKUs by name, bytewise (`collate "C"`) whatever the database's collation, so that the
 * order and a name prefix's range are the same on every Postgres. This index serves both; the unique constraint's
 * index follows the database's collation, which may order names otherwise.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index skus_sku_bytewise_idx on skus (sku collate "C")`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop index skus_sku_bytewise_idx`.execute(db);
}
