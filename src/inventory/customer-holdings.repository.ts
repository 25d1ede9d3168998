import { sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.js';

/**
 * Per-customer limits, counted in `customer_holdings`: the units of each customer's live orders (reserved or
 * confirmed) per limited SKU. Claims are made in the order's own transaction, before its stock is written, so the row
 * lock on the customer's holding orders one customer's concurrent orders across every instance, and a rolled-back
 * order takes its claim with it.
 */

export interface Claim {
  customerId: string;
  units: number;
}

/**
 * Adds each claim to its customer's holding where the SKU's limit allows it. Returns the refused customers with the
 * units they may still order. The customers of one call must be distinct. A SKU whose limit was removed meanwhile
 * refuses nothing.
 */
export async function claimUnits(
  trx: Transaction<Database>,
  skuId: number,
  claims: readonly Claim[],
): Promise<Map<string, number>> {
  if (claims.length === 0) return new Map();
  const customers = claims.map((c) => c.customerId);
  const { rows: granted } = await sql<{ customer_id: string }>`
    with lim as (select max_per_customer as max from skus where id = ${skuId})
    insert into customer_holdings as h (sku_id, customer_id, units)
    select ${skuId}, c.customer_id, c.units
      from unnest(${customers}::text[], ${claims.map((c) => c.units)}::bigint[]) as c(customer_id, units), lim
     where lim.max is null or c.units <= lim.max
    on conflict (sku_id, customer_id) do update set units = h.units + excluded.units
     where (select max from lim) is null or h.units + excluded.units <= (select max from lim)
    returning h.customer_id`.execute(trx);
  const grantedSet = new Set(granted.map((row) => row.customer_id));
  const refused = customers.filter((customer) => !grantedSet.has(customer));
  if (refused.length === 0) return new Map();
  const { rows } = await sql<{ customer_id: string; remaining: number }>`
    select c.customer_id, greatest(k.max_per_customer - coalesce(h.units, 0), 0)::bigint as remaining
      from unnest(${refused}::text[]) as c(customer_id)
      join skus k on k.id = ${skuId}
      left join customer_holdings h on h.sku_id = k.id and h.customer_id = c.customer_id`.execute(trx);
  return new Map(rows.map((row) => [row.customer_id, Number(row.remaining)]));
}

/** Gives claimed units back: the order that claimed them ended (cancelled, expired) or was never placed. */
export async function releaseUnits(
  trx: Transaction<Database>,
  skuId: number,
  customerId: string,
  units: number,
): Promise<void> {
  await sql`update customer_holdings set units = greatest(units - ${units}, 0)
             where sku_id = ${skuId} and customer_id = ${customerId}`.execute(trx);
}

/**
 * Recounts a SKU's holdings from its live orders: when a limit is set, orders placed while there was none count
 * towards it. Run under every segment lock of the SKU, so no order of it commits meanwhile.
 */
export async function recountHoldings(trx: Transaction<Database>, skuId: number): Promise<void> {
  await sql`delete from customer_holdings where sku_id = ${skuId}`.execute(trx);
  await sql`
    insert into customer_holdings (sku_id, customer_id, units)
    select d.sku_id, o.customer_id, sum(d.quantity)
      from stock_deductions d join orders o on o.id = d.order_id
     where d.sku_id = ${skuId} and o.customer_id is not null and o.status in ('reserved', 'confirmed')
     group by d.sku_id, o.customer_id`.execute(trx);
}
