import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Admin writes (create a SKU, restock, re-segment) sent with an Idempotency-Key: the key, a fingerprint of the request
 * and the first answer, written in the same transaction as the change, so a retry replays the answer instead of
 * applying the change again, and of two racing requests with one key exactly one commits.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('admin_requests')
    .addColumn('idempotency_key', 'text', (c) => c.primaryKey())
    .addColumn('request_fingerprint', 'text', (c) => c.notNull())
    .addColumn('status', 'integer', (c) => c.notNull())
    .addColumn('response', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('admin_requests').ifExists().execute();
}
