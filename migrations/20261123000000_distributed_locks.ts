import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * The Postgres lock backend's table: one row per lock name, kept after release so its fencing token only grows.
 * A lock is held while `owner` is set and `expires_at` is in the future.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('distributed_locks')
    .addColumn('lock_key', 'text', (c) => c.primaryKey())
    .addColumn('owner', 'text')
    .addColumn('hold_count', 'integer', (c) =>
      c
        .notNull()
        .defaultTo(0)
        .check(sql`hold_count >= 0`),
    )
    .addColumn('fence', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('distributed_locks').ifExists().execute();
}
