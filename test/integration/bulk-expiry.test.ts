import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/**
 * Expiry in bulk, across two real service processes: ten thousand reservations that run out together. Its own file,
 * left to the full suite (vitest.quick.config.ts): placing them is most of its time.
 */
describe('reservations expiring in bulk', () => {
  let db: Db;
  let instances: ServiceProcess[];
  let urls: string[];
  const post = (i: number, path: string, body?: unknown) => call(urls[i % urls.length]!, 'POST', path, body);
  const view = async (sku: string) => (await call(urls[1]!, 'GET', `/skus/${sku}`)).body;
  const statusOf = async (ids: string[]) => {
    const rows = await db.selectFrom('orders').select('status').where('id', 'in', ids).execute();
    const counts: Record<string, number> = {};
    for (const { status } of rows) counts[status] = (counts[status] ?? 0) + 1;
    return counts;
  };

  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    // A generous wait budget: on this 2-core machine a 503 would only blur the counts.
    instances = await Promise.all([1, 2].map(() => ServiceProcess.spawn({ LOCK_WAIT_MS: '15000' })));
    urls = instances.map((i) => i.url);
  });
  afterAll(async () => {
    await Promise.all((instances ?? []).map((i) => i.stop()));
    await db?.destroy();
  });

  it('puts 10,000 reservations that run out in the same second back on sale within 2 s, the books exact', async () => {
    const RESERVATIONS = 10_000;
    const sku = uniqueSku('bulk');
    expect((await post(0, '/skus', { sku, stock: RESERVATIONS, segments: 8 })).status).toBe(201);
    // Placed with a long hold, a few at a time on both instances; then all made to run out at one instant.
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 96 }, async (_, worker) => {
        while (next < RESERVATIONS) {
          next++;
          const placed = await post(worker, '/orders', { sku, quantity: 1, holdSeconds: 600 });
          expect(placed.status, JSON.stringify(placed.body)).toBe(201);
          ids.push(placed.body.orderId as string);
        }
      }),
    );
    expect(await view(sku)).toMatchObject({ available: 0, reserved: RESERVATIONS });
    const { rows } = await sql<{ at: Date }>`
      with due as (
        update orders set expires_at = date_trunc('second', now()) + interval '2 s' where id = any(${ids}::uuid[])
        returning expires_at
      )
      select max(expires_at) as at from due`.execute(db);
    const expiresAt = rows[0]!.at.getTime();
    await waitFor(async () => (await view(sku)).available === RESERVATIONS, 20_000, 20);
    const lagMs = Date.now() - expiresAt;
    console.log(`[expiry] ${RESERVATIONS} reservations available again ${lagMs} ms after their expiresAt`);
    expect(lagMs).toBeLessThan(2_000);
    expect(await statusOf(ids)).toEqual({ expired: RESERVATIONS });
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit).toMatchObject({ available: RESERVATIONS, reserved: 0, returned: RESERVATIONS, ended: RESERVATIONS });
    // One order.expired event per order, as a cancel writes them, once the feed has sequenced them.
    const expiredEvents = async () =>
      (
        await sql<{ orders: number; units: number }>`
          select count(distinct data->'order'->>'orderId')::int as orders,
                 coalesce(sum((data->'order'->>'quantity')::int), 0)::int as units
            from events where sku = ${sku} and type = 'order.expired'
             and data->'order'->>'previousStatus' = 'reserved' and data->'order'->>'status' = 'expired'`.execute(db)
      ).rows[0]!;
    await waitFor(async () => (await expiredEvents()).orders === RESERVATIONS, 10_000);
    expect(await expiredEvents()).toEqual({ orders: RESERVATIONS, units: RESERVATIONS });
  }, 180_000);
});
