import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const HOLD_SECONDS = 2;
/** The holds of the reservations to confirm: long enough for their confirmations however slow the machine. */
const CONFIRMED_HOLD_SECONDS = 300;
const RESERVATIONS = 240;
const CONFIRMED = 40;

/**
 * Places `RESERVATIONS` reservations of 2 units spread over the fleet (all of the stock), confirms the first
 * `CONFIRMED` of them, and answers when the first of the others runs out (by the database's clock, which set them).
 */
async function reserveEverything(bench: FaultBench, sku: string) {
  const urls = bench.fleet.urls();
  const placed = await Promise.all(
    Array.from({ length: RESERVATIONS }, (_, i) => {
      const holdSeconds = i < CONFIRMED ? CONFIRMED_HOLD_SECONDS : HOLD_SECONDS;
      return call(urls[i % urls.length]!, 'POST', '/orders', { sku, quantity: 2, holdSeconds });
    }),
  );
  expect(placed.map((p) => p.status).filter((s) => s !== 201)).toEqual([]);
  const confirmed = placed.slice(0, CONFIRMED);
  for (const [i, p] of confirmed.entries()) {
    expect((await call(urls[i % urls.length]!, 'POST', `/orders/${p.body.orderId}/confirm`)).status).toBe(200);
  }
  const firstDue = Math.min(...placed.slice(CONFIRMED).map((p) => Date.parse(p.body.expiresAt)));
  return { ids: placed.map((p) => p.body.orderId as string), firstDue };
}

/** Statuses of the orders, straight from Postgres. */
async function statuses(bench: FaultBench, ids: string[]): Promise<Record<string, number>> {
  const rows = await bench.db.selectFrom('orders').select('status').where('id', 'in', ids).execute();
  const counts: Record<string, number> = {};
  for (const { status } of rows) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

async function expectAllExpiredOnce(bench: FaultBench, sku: string, ids: string[], label: string) {
  const audit = await auditSku(bench.db, sku);
  console.log(`[fault] ${label} ${JSON.stringify({ ...audit, statuses: await statuses(bench, ids) })}`);
  expect(booksViolations(audit)).toEqual([]);
  expect(await statuses(bench, ids)).toEqual({ confirmed: CONFIRMED, expired: RESERVATIONS - CONFIRMED });
  expect(audit).toMatchObject({
    sold: CONFIRMED * 2,
    reserved: 0,
    returned: (RESERVATIONS - CONFIRMED) * 2,
    available: (RESERVATIONS - CONFIRMED) * 2,
  });
}

describe('fault: kill -9 of an instance while reservations expire', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({ instances: 3, env: { LOCK_TTL_MS: '3000' } });
  });
  afterAll(() => bench?.teardown());

  it('returns every expired unit exactly once, and an instance that was down catches up when it starts', async () => {
    const sku = await bench.createSku(RESERVATIONS * 2, 8);
    const { ids } = await reserveEverything(bench, sku);
    // The victim dies while the sweeps are under way: once the first units are back, in the middle of returns.
    const sweepsStarted = await waitFor(async () => (await auditSku(bench.db, sku)).returned > 0, 20_000, 10);
    expect(sweepsStarted).toBeLessThan(Infinity);
    const victim = bench.fleet.members[2]!;
    const exited = once(victim.child, 'exit');
    victim.child.kill('SIGKILL');
    await exited;
    bench.fleet.takeOutOfRotation(victim);
    const survivor = bench.fleet.urls()[0]!;
    const returnedMs = await waitFor(
      async () => (await call(survivor, 'GET', `/skus/${sku}`)).body.reserved === 0,
      20_000,
    );
    expect(returnedMs).toBeLessThan(20_000);
    await expectAllExpiredOnce(bench, sku, ids, 'reservations expiring while an instance is killed');

    // Every instance down while holds run out; the first to start returns the units.
    const late = await call(survivor, 'POST', '/orders', { sku, quantity: 4, holdSeconds: 1 });
    expect(late.status).toBe(201);
    await bench.fleet.stopAll();
    await sleep(Math.max(0, Date.parse(late.body.expiresAt) - Date.now()) + 500);
    const restarted = await bench.fleet.add();
    const caughtUpMs = await waitFor(
      async () => (await call(restarted.url, 'GET', `/orders/${late.body.orderId}`)).body.status === 'expired',
      5_000,
    );
    console.log(`[fault] catch-up after a restart: ${JSON.stringify({ returnedMs, caughtUpMs })}`);
    expect(caughtUpMs).toBeLessThanOrEqual(5_000);
    expect(booksViolations(await auditSku(bench.db, sku))).toEqual([]);
  }, 180_000);
});

describe('fault: Redis restarting while reservations expire', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({ instances: 2, env: { LOCK_TTL_MS: '3000' } });
  });
  afterAll(() => bench?.teardown());

  it('expires every reservation once Redis is back, returning each unit exactly once', async () => {
    const sku = await bench.createSku(RESERVATIONS * 2, 8);
    const { ids, firstDue } = await reserveEverything(bench, sku);
    await sleep(Math.max(0, firstDue - Date.now()) + 200);
    await bench.redis.stop(); // SIGKILL: locks and fencing counters go with it (no persistence)
    await sleep(2_000);
    await bench.redis.resume();
    expect(await bench.fleet.readyWithin(10_000)).toBeLessThanOrEqual(10_000);
    const url = bench.fleet.urls()[0]!;
    const returnedMs = await waitFor(async () => (await call(url, 'GET', `/skus/${sku}`)).body.reserved === 0, 20_000);
    expect(returnedMs).toBeLessThan(20_000);
    await expectAllExpiredOnce(bench, sku, ids, 'reservations expiring across a Redis restart');
  }, 180_000);
});
