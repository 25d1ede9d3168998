import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';
import { lockOwners } from '../support/fault-books.js';

const STOCK = 1_500;
const OUTAGE_MS = 3_000;
const LOCK_TTL_MS = 3_000;

describe('fault: Postgres crashes and restarts mid-load', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({ instances: 3, env: { LOCK_TTL_MS: String(LOCK_TTL_MS) } });
  });
  afterAll(() => bench?.teardown());

  it('answers 503 while Postgres is down, loses no committed order, and sells the rest once it is back', async () => {
    const sku = await bench.createSku(STOCK, 8);
    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.3)).toBe(true);

    // Immediate shutdown: every backend dies mid-transaction and the next start recovers from the WAL, as after a crash.
    await bench.postgres.stop('immediate');
    const downAt = Date.now();
    await sleep(OUTAGE_MS / 2);
    // Orders that failed on Postgres released their segment locks on the way out instead of leaving them to expire.
    const locksWhileDown = (await lockOwners(bench.inspector)).size;
    await sleep(OUTAGE_MS / 2);
    const restartAt = Date.now();
    await bench.postgres.resume();
    const readyMs = await bench.fleet.readyWithin(10_000);

    const report = await bench.finish('Postgres crash and restart', sku, load, { readyMs, locksWhileDown });
    const duringOutage = load.attempts.filter((a) => a.sentAt > downAt && a.receivedAt < restartAt);
    const unavailable = duringOutage.filter((a) => a.status === 503).length;
    const resumed = load.attempts.filter((a) => a.sentAt > restartAt && a.status === 201).length;
    console.log(
      `[fault] Postgres outage: ${JSON.stringify({ duringOutage: duringOutage.length, unavailable, resumed })}`,
    );

    expect(unavailable).toBeGreaterThan(0);
    expect(duringOutage.every((a) => a.status === 503)).toBe(true);
    expect(locksWhileDown).toBe(0);
    expect(resumed).toBeGreaterThan(0);
    expect(readyMs).toBeLessThanOrEqual(10_000);
    expect(report.violations).toEqual([]);
  }, 180_000);
});
