import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * `audit_state.sweep_due_at`: when the books audit's sweep of whole books may take its next slice. A whole check costs
 * as much as the SKU has ever sold; the sweep rests after each slice so that it keeps to a share of the time whichever
 * instance runs the pass, and so costs the same a second however long the ledger grows. Null: due now.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table audit_state add column sweep_due_at timestamptz`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table audit_state drop column sweep_due_at`.execute(db);
}
