import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench, type FaultBenchOptions } from '../support/fault-bench.js';
import { checkLine, LineOrderSampler } from '../support/line-books.js';
import { type Join, joinLine, LineCustomers, readTickets } from '../support/line-drop.js';
import { lineHistory, type SkuRead } from '../support/line-history.js';
import { checkHistory } from '../support/linearizability.js';
import { call, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 100;
const CUSTOMERS = 2_000;
const PRE_LINE = CUSTOMERS / 2;
const HOLD_SECONDS = 10;
const OUTAGE_MS = 3_000;
/** Admitted customers acting by then: admissions are under way, and go on (units come back) after the fault. */
const ACTIONS_BEFORE_FAULT = 30;

const customers = Array.from({ length: CUSTOMERS }, (_, i) => ({
  customerId: `f-${i}`,
  quantity: i % 5 === 4 ? 2 : 1,
}));
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * A drop of `STOCK` units to `CUSTOMERS` customers on two instances, half of them joining before the opening and half
 * after it at a steady pace, while admitted customers confirm, or (one in three of the first 150) cancel, a few at a
 * time, so admissions run for a while; `fault` strikes once admissions are under way. Joins are retried through a
 * 503 or a lost answer, as any client would.
 */
async function dropThrough(bench: FaultBench, fault: () => Promise<Record<string, unknown>>) {
  const targets = () => bench.fleet.urls();
  const url = () => targets()[0]!;
  const sku = uniqueSku('line-fault');
  const created = await call(url(), 'POST', '/skus', {
    sku,
    stock: STOCK,
    segments: 8,
    saleStartsAt: iso(Date.now() + 600_000),
  });
  expect(created.status).toBe(201);
  expect(
    (await call(url(), 'PUT', `/skus/${sku}/line`, { capacity: CUSTOMERS, holdSeconds: HOLD_SECONDS })).status,
  ).toBe(200);
  const joinOptions = { targets, concurrency: 32, retryBudgetMs: 30_000 };
  const preLine = await joinLine(sku, customers.slice(0, PRE_LINE), joinOptions);
  expect(preLine.filter((j) => !j.ticketId || !j.preLine)).toEqual([]);

  const opening = Date.now() + 1_000;
  expect((await call(url(), 'PATCH', `/skus/${sku}`, { saleStartsAt: iso(opening) })).status).toBe(200);
  const sampler = new LineOrderSampler(bench.db, sku).start();
  let postLine: Join[] = [];
  const joins = () => [...preLine, ...postLine];
  const buyers = new LineCustomers(sku, {
    targets,
    behaviour: (position) => (position <= 150 && position % 3 === 0 ? 'cancel' : 'confirm'),
    actionsPerRound: 5,
  }).start(joins);
  // Two clients reading the SKU throughout, for the history's check.
  const reads: SkuRead[] = [];
  let reading = true;
  const readers = Promise.all(
    [0, 1].map(async (turn) => {
      while (reading) {
        const sentAt = Date.now();
        const urls = targets();
        const answer = await call(urls[turn++ % urls.length]!, 'GET', `/skus/${sku}`).catch(() => undefined);
        reads.push({ sentAt, receivedAt: Date.now(), status: answer?.status ?? 0, body: answer?.body });
        await sleep(20);
      }
    }),
  );
  expect(await waitFor(() => Date.now() >= opening + 50, 5_000, 5)).toBeLessThan(Infinity);
  const joining = joinLine(sku, customers.slice(PRE_LINE), { ...joinOptions, concurrency: 16, perSecond: 100 }).then(
    (done) => (postLine = done),
  );

  expect(await waitFor(() => buyers.actions.length >= ACTIONS_BEFORE_FAULT, 60_000)).toBeLessThan(Infinity);
  const faultAt = Date.now();
  const observed = await fault();
  const soldOutMs = await waitFor(
    async () => (await call(url(), 'GET', `/skus/${sku}/line`).catch(() => undefined))?.body.status === 'sold_out',
    90_000,
    100,
  );
  await joining;
  reading = false;
  await Promise.all([buyers.stop(), sampler.stop(), readers]);

  const crashed = bench.fleet.members.filter((m) => m.child.exitCode !== null && m.child.exitCode !== 0);
  const report = await checkLine(bench.db, sku, joins());
  const acknowledged = [...new Set(joins().flatMap((j) => (j.ticketId ? [j.ticketId] : [])))];
  const views = await readTickets(acknowledged, targets, 32);
  // Every answer the customers and readers got, checked for linearizability: a reservation no read named while the
  // drop ran is named by this last reading of every ticket.
  for (const view of views.values()) if (view.status === 200) buyers.saw(view);
  const history = lineHistory(sku, STOCK, [...buyers.reservations.values()], buyers.actions, reads);
  const linearizability = checkHistory(history, { timeBudgetMs: 20_000 });
  if (linearizability.verdict === 'unknown') console.log(`[line fault] history ${linearizability.report}`);
  const statuses: Record<string, number> = {};
  for (const view of views.values()) statuses[view.body?.status] = (statuses[view.body?.status] ?? 0) + 1;
  const joinedAfterFault = postLine.filter((j) => j.ticketId && j.attempts[0]!.sentAt > faultAt).length;
  const retried = joins().filter((j) => j.attempts.length > 1).length;
  console.log(
    `[line fault] ${JSON.stringify({ ...observed, soldOutMs, joinedAfterFault, retried, samples: sampler.samples, statuses, ...report, violations: report.violations.slice(0, 10), linearizability: { operations: history.operations.length, verdict: linearizability.verdict, checkMs: Math.round(linearizability.elapsedMs) } })}`,
  );

  expect(crashed).toEqual([]);
  expect(buyers.problems).toEqual([]);
  // Every join ended with its ticket, or refused as closed once the line had sold out; every ticket still readable.
  expect(
    postLine.filter((j) => !j.ticketId && j.attempts.at(-1)!.code !== 'line_closed').map((j) => j.attempts),
  ).toEqual([]);
  expect(postLine.filter((j) => !j.ticketId && j.attempts.at(-1)!.receivedAt < report.soldOutAt!.getTime())).toEqual(
    [],
  );
  expect([...views].filter(([id, v]) => v.status !== 200 || v.body.ticketId !== id)).toEqual([]);
  // Nothing lost or doubled, nobody out of turn, books exact, and the line sold out.
  expect(sampler.violations).toEqual([]);
  expect(report.violations).toEqual([]);
  expect(linearizability.verdict === 'violation' ? linearizability.report : '').toBe('');
  expect(soldOutMs).toBeLessThan(Infinity);
  expect(report.sold).toBe(STOCK);
  expect(report.orderStatuses.cancelled).toBeGreaterThan(0);
  expect(statuses.waiting ?? 0).toBe(0);
  expect(statuses.admitted ?? 0).toBe(0);
  return { report, joinedAfterFault };
}

const cases: {
  name: string;
  bench: FaultBenchOptions;
  fault: (bench: FaultBench) => Promise<Record<string, unknown>>;
}[] = [
  {
    name: 'an instance killed with SIGKILL mid-admissions',
    // The victim spends 100 ms inside each critical section: it is mostly in the middle of placing admissions.
    bench: {
      instances: 2,
      env: { LOCK_TTL_MS: '3000' },
      envOf: (i): Record<string, string> => (i === 1 ? { CRITICAL_SECTION_DELAY_MS: '100' } : {}),
    },
    fault: async (bench) => {
      const victim = bench.fleet.members[1]!;
      const { rows } = await sql<{ n: string }>`
        select count(*) as n from line_tickets where status = 'admitting'`.execute(bench.db);
      const exited = once(victim.child, 'exit');
      victim.child.kill('SIGKILL');
      await exited;
      bench.fleet.takeOutOfRotation(victim);
      return { admittingWhenKilled: Number(rows[0]!.n) };
    },
  },
  ...[
    {
      name: 'Redis restarted with its data',
      redisArgs: ['--appendonly', 'yes', '--appendfsync', 'always'],
      keeps: true,
    },
    { name: 'Redis restarted empty', redisArgs: [], keeps: false },
  ].map(({ name, redisArgs, keeps }) => ({
    name,
    bench: { instances: 2, redisArgs, env: { LOCK_TTL_MS: '3000' } },
    fault: async (bench: FaultBench) => {
      await bench.inspector.set('fault:marker', 'before the crash');
      await bench.redis.stop(); // SIGKILL: a crash, not a shutdown
      await sleep(OUTAGE_MS);
      await bench.redis.resume();
      const afterRestart = new Redis(bench.redis.url);
      const keptData = (await afterRestart.get('fault:marker')) !== null;
      afterRestart.disconnect();
      expect(keptData).toBe(keeps);
      return { keptData, readyMs: await bench.fleet.readyWithin(10_000) };
    },
  })),
  {
    name: 'Postgres crashed and restarted',
    bench: { instances: 2, env: { LOCK_TTL_MS: '3000' } },
    fault: async (bench) => {
      // Immediate shutdown: every backend dies mid-transaction and the next start recovers from the WAL.
      await bench.postgres.stop('immediate');
      await sleep(OUTAGE_MS);
      await bench.postgres.resume();
      return { readyMs: await bench.fleet.readyWithin(10_000) };
    },
  },
];

describe.each(cases)('fault: a drop through a waiting line, $name', ({ name, bench: options, fault }) => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start(options);
  });
  afterAll(() => bench?.teardown());

  it('loses no acknowledged ticket, admits nobody twice or out of turn, keeps the books exact and sells out', async () => {
    const { joinedAfterFault } = await dropThrough(bench, () => fault(bench));
    console.log(`[line fault] ${name}: ${joinedAfterFault} tickets joined after the fault struck`);
  }, 180_000);
});
