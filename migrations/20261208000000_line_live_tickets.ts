import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * A line's capacity bounds the tickets that can still be admitted, not every ticket it ever gave: a line whose
 * tickets all ended (bought, cancelled, expired, refused) while units remain takes joins again.
 *
 * - `line_tickets.settled`: an admitted ticket whose reservation ended (confirmed, cancelled or expired). The partial
 *   index holds the admitted tickets not settled yet, so settling a line reads its live admissions only.
 * - `sku_lines.final_tickets`: the line's tickets that can never be admitted again (refused, or settled); the line
 *   holds `tickets - final_tickets` live ones, and a join finds room while that is below its capacity.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table line_tickets add column settled boolean not null default false`.execute(db);
  await sql`create index line_tickets_unsettled_idx on line_tickets (sku_id)
              where status = 'admitted' and not settled`.execute(db);
  await sql`alter table sku_lines add column final_tickets integer not null default 0
              check (final_tickets >= 0 and final_tickets <= tickets)`.execute(db);
  // Lines made before: their refused tickets are final already; their admissions are settled by the next pass.
  await sql`
    update sku_lines l set final_tickets = r.refused
      from (select sku_id, count(*)::int as refused from line_tickets where status = 'refused' group by sku_id) r
     where l.sku_id = r.sku_id`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table sku_lines drop column final_tickets`.execute(db);
  await sql`drop index line_tickets_unsettled_idx`.execute(db);
  await sql`alter table line_tickets drop column settled`.execute(db);
}
