import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Waiting lines (src/lines). `sku_lines`: one row per SKU sold through a line, its settings and its state; every join
 * and every admission pass locks this row, so the numbers it hands out are committed in the order they were given.
 * `line_tickets`: one row per customer in a line. A ticket's `number` is its place in line order: null until the
 * draw for a ticket of the pre-line, given at the join for one that came after. `units_before` is the quantity all
 * tickets before it asked for, so how much of the line is ahead of a ticket is one subtraction.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create table sku_lines (
      sku_id integer primary key references skus (id),
      capacity integer not null check (capacity between 1 and 10000000),
      hold_seconds integer not null check (hold_seconds between 1 and 86400),
      tickets integer not null default 0 check (tickets >= 0),
      pre_line_tickets integer not null default 0 check (pre_line_tickets >= 0),
      pre_line_units bigint not null default 0,
      drawn_at timestamptz,
      draw_seed text,
      numbers_given bigint not null default 0,
      units_given bigint not null default 0,
      admitted_through bigint not null default 0,
      units_admitted bigint not null default 0,
      sold_out_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    )`.execute(db);
  await sql`
    create table line_tickets (
      id uuid primary key,
      sku_id integer not null references sku_lines (sku_id),
      customer_id text not null,
      quantity integer not null check (quantity > 0),
      pre_line boolean not null,
      number bigint,
      units_before bigint,
      status text not null default 'waiting' check (status in ('waiting', 'admitting', 'admitted', 'refused')),
      order_id uuid,
      refusal text,
      joined_at timestamptz not null default now(),
      admitted_at timestamptz,
      unique (sku_id, customer_id),
      unique (sku_id, number)
    )`.execute(db);
  await sql`create index line_tickets_admitting_idx on line_tickets (sku_id) where status = 'admitting'`.execute(db);
  await sql`create index line_tickets_pre_line_idx on line_tickets (sku_id) where number is null`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`drop table if exists line_tickets`.execute(db);
  await sql`drop table if exists sku_lines`.execute(db);
}
