import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * What each join costs Postgres beyond its ticket's own row, cut down, as 20261130000000 did for orders.
 *
 * - `line_tickets.sku_id`'s foreign key to `sku_lines` goes. The join statement (src/lines/line-joins.ts) is the only
 *   writer of new tickets, and takes the line from the row it has just locked in the same statement; no line is ever
 *   deleted. The key repeated that guarantee with a lookup of the line's row for every ticket inserted: close to half
 *   of an insert's cost, and paid while the line's lock, which every join of every instance waits for, is held.
 * - The partial index on pre-line tickets (`number is null`) goes. Its one reader is the draw, which runs once per
 *   line, at the opening, when every ticket of the line is in the pre-line: the index on `(sku_id, customer_id)` finds
 *   them as well. Every pre-line ticket paid an entry in it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table line_tickets drop constraint line_tickets_sku_id_fkey`.execute(db);
  await sql`drop index line_tickets_pre_line_idx`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`create index line_tickets_pre_line_idx on line_tickets (sku_id) where number is null`.execute(db);
  await sql`alter table line_tickets
    add constraint line_tickets_sku_id_fkey foreign key (sku_id) references sku_lines (sku_id)`.execute(db);
}
