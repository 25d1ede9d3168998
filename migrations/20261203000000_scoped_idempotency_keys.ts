import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Idempotency keys belong to their caller: the service stores `<scope> <key>`, the scope being `customer:<id>` for a
 * customer token, `key:<name>` for a service key and `anonymous` for a caller without a credential
 * (src/http/idempotency-key.ts). Keys stored before were the client's alone; this rewrites them into the scope of the
 * caller that most likely sent them, decided from what each row records, so a retry in flight across the upgrade
 * still replays for that caller:
 * - an order naming a customer: that customer's (`customer:<customer_id>`), as a customer token places for its own
 *   customer; an order without one: `anonymous`, as placing without a credential was open with `ADMIN_TOKEN` alone.
 * - an admin write: `key:ADMIN_TOKEN`, the one credential that holds `stock:admin` wherever admin writes need one,
 *   unless an API_KEYS_FILE is used.
 * A row's real caller may have been another one (a service key placing for a customer, an operations key restocking):
 * its retry across the upgrade then counts as a new request. Nothing else changes; the unique index on the orders'
 * keys holds as before, since distinct keys stay distinct.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`update orders
               set idempotency_key = case when customer_id is not null then 'customer:' || customer_id
                                          else 'anonymous' end || ' ' || idempotency_key
             where idempotency_key is not null`.execute(db);
  await sql`update admin_requests set idempotency_key = 'key:ADMIN_TOKEN ' || idempotency_key`.execute(db);
}

/** Back to the client's key alone; where two callers used one key, the first keeps it and the others lose theirs. */
export async function down(db: Kysely<any>): Promise<void> {
  const unscoped = sql`substr(idempotency_key, strpos(idempotency_key, ' ') + 1)`;
  await sql`update orders o set idempotency_key = null
              from (select id, row_number() over (partition by ${unscoped} order by created_at, id) as n
                      from orders where idempotency_key is not null) d
             where o.id = d.id and d.n > 1`.execute(db);
  await sql`update orders set idempotency_key = ${unscoped} where idempotency_key is not null`.execute(db);
  await sql`delete from admin_requests a
             using (select idempotency_key, row_number() over (partition by ${unscoped} order by created_at) as n
                      from admin_requests) d
             where a.idempotency_key = d.idempotency_key and d.n > 1`.execute(db);
  await sql`update admin_requests set idempotency_key = ${unscoped}`.execute(db);
}
