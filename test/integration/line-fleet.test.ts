import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { checkLine, LineOrderSampler } from '../support/line-books.js';
import {
  type Behaviour,
  drawOrder,
  type Join,
  joinLine,
  LineCustomers,
  readTickets,
  SoldOutWatch,
} from '../support/line-drop.js';
import { call, testEndpoints, uniqueSku } from '../support/service.js';
import { ServiceFleet } from '../support/service-fleet.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 200;
const CUSTOMERS = 20_000;
/** Joins before the opening; the rest come after it. */
const PRE_LINE = CUSTOMERS / 2;
/** Customers of the pre-line who join a second time, through the other instance: they get the same ticket. */
const JOINING_AGAIN = 100;
const HOLD_SECONDS = 15;
const IN_FLIGHT = 64;

/** Every fifth customer asks for two units: a ticket that does not fit must wait rather than be passed. */
const customers = Array.from({ length: CUSTOMERS }, (_, i) => ({
  customerId: `drop-${i}`,
  quantity: i % 5 === 4 ? 2 : 1,
}));

/**
 * What the admitted customers do, by their place in line: among the first 160, one in ten cancels and one in ten lets
 * the hold run out; everyone else confirms. So the units of every cancelled or expired admission go to a customer
 * who confirms, and the line sells out.
 */
const behaviour = (position: number): Behaviour =>
  position > 160 || position % 10 < 8 ? 'confirm' : position % 10 === 8 ? 'cancel' : 'lapse';

const iso = (ms: number) => new Date(ms).toISOString();

describe('a drop through a waiting line on two instances', () => {
  let fleet: ServiceFleet;
  let db: Db;
  beforeAll(async () => {
    fleet = await ServiceFleet.start(2, {});
    db = createDatabase(testEndpoints().databaseUrl, 2);
  });
  afterAll(async () => {
    await fleet?.stopAll();
    await db?.destroy();
  });

  it('admits exactly the stock in line order, honours every confirmation, cancellation and expiry, and tells everyone else sold out within a second', async () => {
    const targets = () => fleet.urls();
    const url = targets()[0]!;
    const sku = uniqueSku('drop');
    // Opening later than the pre-line's joins can take; moved to a moment from now once they are all in.
    const created = await call(url, 'POST', '/skus', {
      sku,
      stock: STOCK,
      segments: 8,
      saleStartsAt: iso(Date.now() + 600_000),
    });
    expect(created.status).toBe(201);
    expect(
      (await call(url, 'PUT', `/skus/${sku}/line`, { capacity: CUSTOMERS, holdSeconds: HOLD_SECONDS })).status,
    ).toBe(200);

    const started = Date.now();
    const joinOptions = { targets, concurrency: IN_FLIGHT, retryBudgetMs: 30_000 };
    const preLine = await joinLine(sku, customers.slice(0, PRE_LINE), joinOptions);
    const again = await joinLine(sku, customers.slice(0, JOINING_AGAIN), joinOptions);
    const preLineMs = Date.now() - started;
    console.log(`[line] pre-line in ${preLineMs} ms`);
    expect(preLine.filter((j) => !j.ticketId || !j.preLine)).toEqual([]);
    expect(again.filter((j, i) => j.attempts.at(-1)!.status !== 200 || j.ticketId !== preLine[i]!.ticketId)).toEqual(
      [],
    );

    const opening = Date.now() + 1_500;
    expect((await call(url, 'PATCH', `/skus/${sku}`, { saleStartsAt: iso(opening) })).status).toBe(200);
    const sampler = new LineOrderSampler(db, sku).start();
    let postLine: Join[] = [];
    const allJoins = () => [...preLine, ...again, ...postLine];
    const buyers = new LineCustomers(sku, { targets, behaviour }).start(allJoins);
    // Joins after the opening by the shared clock (Redis's, on this machine), with a margin for its measured offset.
    expect(await waitFor(() => Date.now() >= opening + 50, 5_000, 5)).toBeLessThan(Infinity);
    const lineRead = await call(url, 'GET', `/skus/${sku}/line`);
    const postStarted = Date.now();
    const joining = joinLine(sku, customers.slice(PRE_LINE), joinOptions).then((joins) => (postLine = joins));

    // Waiting customers at the end of the pre-line watch their tickets from the draw on.
    expect(
      await waitFor(async () => (await call(url, 'GET', `/skus/${sku}/line`)).body.draw.seed !== null, 5_000),
    ).toBeLessThan(Infinity);
    const seed = (await call(url, 'GET', `/skus/${sku}/line`)).body.draw.seed as string;
    const watched = drawOrder(
      seed,
      preLine.map((j) => j.ticketId!),
    ).slice(-8);
    const watch = new SoldOutWatch(watched, targets).start();

    await joining;
    const postLineMs = Date.now() - postStarted;
    console.log(`[line] post-opening joins in ${postLineMs} ms; actions ${buyers.actions.length}`);
    const soldOutMs = await waitFor(
      async () => (await call(url, 'GET', `/skus/${sku}/line`)).body.status === 'sold_out',
      60_000,
      100,
    );
    const watchedMs = await waitFor(() => watch.allSoldOut(), 10_000);
    await Promise.all([buyers.stop(), sampler.stop(), watch.stop()]);
    const lastConfirmation = buyers.lastConfirmationSentAt();

    // Every ticket read back, from both instances, once all is over.
    const joins = allJoins();
    const ticketIds = [...new Set(joins.flatMap((j) => (j.ticketId ? [j.ticketId] : [])))];
    const sweepStarted = Date.now();
    const views = await readTickets(ticketIds, targets, IN_FLIGHT);
    const sweepMs = Date.now() - sweepStarted;
    const report = await checkLine(db, sku, joins);

    const statuses: Record<string, number> = {};
    for (const view of views.values()) statuses[view.body?.status] = (statuses[view.body?.status] ?? 0) + 1;
    const soldOutDelays = [...watch.soldOutAt.values()].map((r) => r.receivedAt - lastConfirmation);
    const succeeded = (behaviour: string) =>
      buyers.actions.filter((a) => a.behaviour === behaviour && a.status === 200);
    const closedJoins = postLine.filter((j) => j.attempts.at(-1)!.code === 'line_closed');
    console.log(
      `[line] ${JSON.stringify({
        preLineMs,
        postLineMs,
        joinsPerSecond: Math.round(((PRE_LINE + JOINING_AGAIN + postLine.length) * 1000) / (preLineMs + postLineMs)),
        soldOutMs,
        watchedMs,
        soldOutDelays,
        sweepMs,
        samples: sampler.samples,
        heads: sampler.heads.size,
        closedJoins: closedJoins.length,
        actions: buyers.actions.length,
        statuses,
        ...report,
        violations: report.violations.slice(0, 10),
      })}`,
    );

    // Preconditions: the line really formed before the opening, and admissions really ran, ended and came back.
    expect(lineRead.body.status).toMatch(/forming|open/);
    expect(report.preLine).toBe(PRE_LINE);
    expect(postLine.filter((j) => j.ticketId && j.preLine)).toEqual([]);
    expect(report.tickets).toBeGreaterThan(PRE_LINE);
    expect(report.orderStatuses.cancelled).toBeGreaterThan(0);
    expect(report.orderStatuses.expired).toBeGreaterThan(0);
    expect(sampler.samples).toBeGreaterThan(20);
    expect(sampler.heads.size).toBeGreaterThan(2);
    expect(buyers.problems).toEqual([]);

    // Every join answered with a ticket, or refused as closed once the line had sold out.
    const unanswered = postLine.filter((j) => !j.ticketId && j.attempts.at(-1)!.code !== 'line_closed');
    expect(unanswered.map((j) => j.attempts)).toEqual([]);
    expect(closedJoins.filter((j) => j.attempts.at(-1)!.receivedAt < report.soldOutAt!.getTime())).toEqual([]);

    // Exactly the stock, in line order, one order per admission, books exact, returned units admitted again.
    expect(sampler.violations).toEqual([]);
    expect(report.violations).toEqual([]);
    expect(report.sold).toBe(STOCK);

    // Every confirmation, cancellation and expiry honoured, as the customers read their tickets.
    const read = (id: string) => views.get(id)?.body?.status;
    expect(succeeded('confirm').filter((a) => read(a.ticketId) !== 'purchased')).toEqual([]);
    // A cancel that came after the hold ran out is answered, and read, as expired.
    expect(succeeded('cancel').filter((a) => read(a.ticketId) !== a.orderStatus)).toEqual([]);
    const lapsing = [...views.values()].filter((v) => v.body.reservation && behaviour(v.body.position) === 'lapse');
    expect(lapsing.filter((v) => v.body.status !== 'expired')).toEqual([]);
    expect(statuses.purchased).toBe(report.orderStatuses.confirmed);
    expect(statuses.cancelled).toBe(report.orderStatuses.cancelled);
    expect(statuses.expired).toBe(report.orderStatuses.expired);

    // Everyone else sold out: the watchers within a second of the last confirmation, and every ticket now.
    expect(soldOutMs).toBeLessThan(Infinity);
    expect(watch.otherStatuses).toEqual([]);
    expect(soldOutDelays).toHaveLength(watched.length);
    expect(Math.max(...soldOutDelays)).toBeLessThan(1_000);
    expect([...views.values()].filter((v) => v.status !== 200)).toEqual([]);
    expect(statuses.waiting ?? 0).toBe(0);
    expect(statuses.admitted ?? 0).toBe(0);
    expect(statuses.sold_out).toBe(report.tickets - report.admitted);
  }, 240_000);
});
