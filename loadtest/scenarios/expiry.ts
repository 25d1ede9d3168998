// Expiry at a drop's pace: many reservations reaching expiresAt in the same second, and how soon their units sell again.
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { ServiceTarget } from '../infra/service-process.js';
import type { RunContext } from './context.js';

/** How often the SKU is read while the units come back: the lag is known to this much. */
const POLL_MS = 20;
/** Past this, the row reports that the units did not all come back rather than waiting on. */
const GIVE_UP_MS = 30_000;

/**
 * Places `reservations` one-unit reservations of one SKU (a long hold, so none runs out while they are placed), moves
 * every one's `expiresAt` to the same instant two seconds ahead in Postgres, as a drop's admissions or a flash sale's
 * checkouts end together, then reads the SKU until every unit is available again. The lag is from that instant to the
 * read that saw them all back; the rate is the reservations ended over that lag.
 */
export async function runExpiry(ctx: RunContext, service: ServiceTarget, reservations: number, segments: number) {
  const api = ctx.api(service);
  const sku = await ctx.createSku(service, `expiry-${reservations}`, reservations, segments);
  const placing = { title: `expiry · placing ${reservations} reservations`, amount: reservations };
  const placed = await ctx.round(service, { ...placing, body: { sku, quantity: 1, holdSeconds: 3_600 } });
  const held = (await api.sku(sku)).reserved;
  if (held !== reservations) throw new Error(`expiry: ${held} of ${reservations} reservations held after placing`);

  ctx.progress.note(`expiry · ${reservations} reservations running out together…`);
  const { rows } = await sql<{ at: Date }>`
    with due as (
      update orders o set expires_at = date_trunc('second', now()) + interval '2 s'
        from skus k
       where k.sku = ${sku} and o.sku_id = k.id and o.status = 'reserved'
      returning o.expires_at
    )
    select max(expires_at) as at from due`.execute(ctx.backing.db);
  const expiresAt = rows[0]!.at.getTime();
  await sleep(Math.max(0, expiresAt - Date.now()));
  let view = await api.sku(sku);
  while (view.available < reservations && Date.now() - expiresAt < GIVE_UP_MS) {
    await sleep(POLL_MS);
    view = await api.sku(sku);
  }
  const lagMs = Date.now() - expiresAt;
  const booksExact = view.available === reservations && view.reserved === 0 && view.sold === 0;
  return {
    id: `expiry-${reservations}`,
    label: `${reservations.toLocaleString('en-US')} reservations · ${segments} segments`,
    reservations,
    segments,
    placedPerSecond: placed.ratePerSecond[201] ?? 0,
    lagMs,
    expiriesPerSecond: reservations / (lagMs / 1000),
    back: view.available,
    booksExact,
  };
}
