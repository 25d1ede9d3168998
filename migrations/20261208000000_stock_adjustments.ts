import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Stock that also goes down: `stock_additions` becomes the log of every change to a SKU's stock other than orders,
 * signed, so that `skus.total_stock = Σ stock_additions.quantity` still holds when an adjustment or a counted set
 * removes units.
 *
 * - `kind`: `create`, `restock` (as `reason` said until now), `adjustment` (POST /skus/:sku/adjustments) or `count`
 *   (PUT /skus/:sku/stock). Only adjustments and counts may be negative. Null where a writer that predates the column
 *   (an instance of the previous release during a rolling upgrade) left it out: such a row is a create or a restock,
 *   named by its `reason`.
 * - `reason`: for an adjustment or a count, one of the documented reasons; for a create or a restock, its kind, as
 *   before.
 * - `actor`: who made the change (the credential: `key:<name>`, `customer:<id>` or `open`); null on rows written before.
 * - `note`, `reference`: free text from the caller (a reference names the document behind the change).
 * - `available_after`: the SKU's units available right after the change, known exactly because adjustments and counts
 *   are made under every segment lock; null on rows written before.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table stock_additions
    add column kind text,
    add column actor text,
    add column note text,
    add column reference text,
    add column available_after bigint`.execute(db);
  await sql`update stock_additions set kind = reason`.execute(db);
  await sql`alter table stock_additions
    add constraint stock_additions_kind_check check (kind in ('create', 'restock', 'adjustment', 'count')),
    drop constraint stock_additions_quantity_check,
    add constraint stock_additions_quantity_check check (quantity >= 0 or kind in ('adjustment', 'count'))`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  // A removal has no form before this migration: rolling back over one would leave total_stock unexplained.
  const { rows } = await sql<{ n: string }>`select count(*) as n from stock_additions
    where kind in ('adjustment', 'count')`.execute(db);
  if (Number(rows[0]!.n) > 0) throw new Error('stock_additions holds adjustments or counts: cannot roll back');
  await sql`alter table stock_additions
    drop constraint stock_additions_quantity_check,
    add constraint stock_additions_quantity_check check (quantity >= 0),
    drop column kind, drop column actor, drop column note, drop column reference,
    drop column available_after`.execute(db);
}
