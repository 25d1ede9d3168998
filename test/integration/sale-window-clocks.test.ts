import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call, testEndpoints, uniqueSku } from '../support/service.js';
import { ServiceFleet } from '../support/service-fleet.js';

/** How far from the opening an answer may fall (ms): the shared clock's promise, with room for rounding only. */
const BOUND_MS = 50;
/** How far each instance's own clock is off: one runs 3 s ahead, the other 3 s behind. */
const SKEWS_MS = [3_000, -3_000];
const STOCK = 300;

interface Answer {
  instance: number;
  status: number;
  code?: string;
  retryAfter: number;
  sentAt: number;
  receivedAt: number;
}

/**
 * Two service processes whose own clocks are 6 s apart open one SKU at one instant, the shared clock's, under a flood
 * that starts 2 s before the opening and runs until the stock is gone. Client times are this host's clock, which the
 * test Redis (the shared clock) runs on.
 */
describe('a sale window opens at one instant on instances whose clocks disagree', () => {
  let fleet: ServiceFleet;
  let db: Db;
  beforeAll(async () => {
    fleet = await ServiceFleet.start(2, { LOG_LEVEL: 'warn' }, (i) => ({ PROCESS_CLOCK_SKEW_MS: String(SKEWS_MS[i]) }));
    db = createDatabase(testEndpoints().databaseUrl, 2);
  }, 90_000);
  afterAll(async () => {
    await fleet?.stopAll();
    await db?.destroy();
  });

  it('measures each instance against the shared clock, whatever its own clock says', async () => {
    for (const [i, member] of fleet.members.entries()) {
      const metrics = await (await fetch(`${member.url}/metrics`)).text();
      const offset = Number(/^stock_shared_clock_offset_seconds (\S+)$/m.exec(metrics)?.[1]);
      // Its own clock is SKEWS_MS ahead: the shared clock is that much behind it.
      expect(Math.abs(offset * 1000 + SKEWS_MS[i]!)).toBeLessThan(BOUND_MS);
    }
  });

  it('sells on neither before the opening, on both right after it, and exactly the stock', async () => {
    const sku = uniqueSku('drop');
    const opensAt = Date.now() + 2_000;
    const created = await call(fleet.members[0]!.url, 'POST', '/skus', {
      sku,
      stock: STOCK,
      segments: 4,
      saleStartsAt: new Date(opensAt).toISOString(),
    });
    expect(created.status).toBe(201);

    const answers: Answer[] = [];
    const worker = async (w: number) => {
      for (let n = 0; Date.now() < opensAt + 10_000; n++) {
        const instance = (w + n) % 2;
        const sentAt = Date.now();
        const answer = await call(fleet.members[instance]!.url, 'POST', '/orders', { sku, quantity: 1 });
        const receivedAt = Date.now();
        answers.push({
          instance,
          status: answer.status,
          code: answer.body?.code,
          retryAfter: Number(answer.headers.get('retry-after')),
          sentAt,
          receivedAt,
        });
        if (answer.body?.code === 'out_of_stock') return;
      }
    };
    await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));

    const placed = answers.filter((a) => a.status === 201);
    const notOnSale = answers.filter((a) => a.code === 'not_on_sale');
    // A 201 answered before the opening was decided before it; a refusal sent after it was decided after it.
    expect(placed.filter((a) => a.receivedAt < opensAt - BOUND_MS)).toEqual([]);
    expect(notOnSale.filter((a) => a.sentAt > opensAt + BOUND_MS)).toEqual([]);
    for (const instance of [0, 1]) {
      expect(notOnSale.filter((a) => a.instance === instance).length).toBeGreaterThan(0);
      expect(placed.filter((a) => a.instance === instance).length).toBeGreaterThan(0);
    }
    // Before the opening, every answer is the refusal, with the seconds until the opening (rounded up).
    expect(answers.filter((a) => a.receivedAt < opensAt - BOUND_MS && a.code !== 'not_on_sale')).toEqual([]);
    for (const a of notOnSale) {
      expect(a.retryAfter).toBeGreaterThanOrEqual(Math.ceil((opensAt - a.receivedAt - BOUND_MS) / 1000));
      expect(a.retryAfter).toBeLessThanOrEqual(Math.ceil((opensAt - a.sentAt + BOUND_MS) / 1000));
    }
    // Then the stock sells exactly, and nothing else is answered.
    expect(placed.length).toBe(STOCK);
    expect(answers.filter((a) => a.status !== 201 && a.status !== 409)).toEqual([]);
    const audit = await auditSku(db, sku);
    expect(audit).toMatchObject({ available: 0, sold: STOCK });
    expect(booksViolations(audit)).toEqual([]);
  }, 60_000);
});
