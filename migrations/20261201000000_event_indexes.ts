import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Two index entries fewer for every event, and so for every order placed with events on.
 *
 * - `event_outbox`: its primary key becomes `(xid, id)`, the order in which the sequencer reads and deletes it
 *   (src/events/sequencer.ts), instead of `id` alone beside a second index on `(xid, id)`. Nothing looked an outbox
 *   row up by `id` alone.
 * - `events`: `events_occurred_at_idx` goes. Retention (src/events/retention.ts) walks the feed oldest first by
 *   position instead, from where its last statement stopped, and ends at the first event inside the retention.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table event_outbox drop constraint event_outbox_pkey, add primary key (xid, id)`.execute(db);
  await sql`drop index event_outbox_xid_idx`.execute(db);
  await sql`drop index events_occurred_at_idx`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`create index events_occurred_at_idx on events (occurred_at)`.execute(db);
  await sql`create index event_outbox_xid_idx on event_outbox (xid, id)`.execute(db);
  await sql`alter table event_outbox drop constraint event_outbox_pkey, add primary key (id)`.execute(db);
}
