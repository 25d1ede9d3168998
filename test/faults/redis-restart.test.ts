import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';

const STOCK = 1_500;
const OUTAGE_MS = 3_000;

/** POST /skus/:sku/restock, with when its answer came (status 0: none within the bound). */
async function restockAnswer(url: string, sku: string): Promise<{ status: number; receivedAt: number }> {
  try {
    const response = await fetch(`${url}/skus/${sku}/restock`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ quantity: 1 }),
      signal: AbortSignal.timeout(30_000),
    });
    await response.arrayBuffer();
    return { status: response.status, receivedAt: Date.now() };
  } catch {
    return { status: 0, receivedAt: Date.now() };
  }
}

const cases = [
  {
    name: 'Redis restarted with its data (append-only file)',
    redisArgs: ['--appendonly', 'yes', '--appendfsync', 'always'],
    comesBackEmpty: false,
  },
  {
    name: 'Redis restarted empty (no persistence: locks and fencing counters gone)',
    redisArgs: [],
    comesBackEmpty: true,
  },
];

describe.each(cases)('fault: $name, mid-load', ({ name, redisArgs, comesBackEmpty }) => {
  let bench: FaultBench;
  beforeAll(async () => {
    bench = await FaultBench.start({ instances: 3, redisArgs, env: { LOCK_TTL_MS: '3000' } });
  });
  afterAll(() => bench?.teardown());

  it('answers 503 while Redis is down, applies nothing by halves, and sells the rest once it is back', async () => {
    const sku = await bench.createSku(STOCK, 8);
    const quietSku = await bench.createSku(10, 2);
    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.3)).toBe(true);

    // A key no service touches tells whether Redis came back with its data.
    await bench.inspector.set('fault:marker', 'before the crash');
    await bench.redis.stop(); // SIGKILL: a crash, not a shutdown
    const downAt = Date.now();
    // A configuration change needs every segment lock: it too must fail fast rather than wait for Redis, also for
    // a SKU that no order has touched lately.
    const restock = restockAnswer(bench.fleet.urls()[0]!, quietSku);
    await sleep(OUTAGE_MS);
    const restartAt = Date.now();
    await bench.redis.resume();
    const afterRestart = new Redis(bench.redis.url);
    const keptData = (await afterRestart.get('fault:marker')) !== null;
    afterRestart.disconnect();
    const readyMs = await bench.fleet.readyWithin(10_000);

    const restocked = await restock;
    const report = await bench.finish(name, sku, load, { readyMs, restockDuringOutage: restocked.status });
    const duringOutage = load.attempts.filter((a) => a.sentAt > downAt && a.receivedAt < restartAt);
    const unavailable = duringOutage.filter((a) => a.status === 503).length;
    // Without Redis there is no lock: nothing may be sold; a retry of an order placed before may still replay (200).
    const soldWithoutLock = duringOutage.filter((a) => a.status === 201).length;
    const resumed = load.attempts.filter((a) => a.sentAt > restartAt && a.status === 201).length;
    console.log(
      `[fault] ${name}: ${JSON.stringify({ keptData, duringOutage: duringOutage.length, unavailable, soldWithoutLock, resumed })}`,
    );

    expect(keptData).toBe(!comesBackEmpty);
    expect(unavailable).toBeGreaterThan(0);
    expect(soldWithoutLock).toBe(0);
    expect(duringOutage.every((a) => a.status === 503 || a.status === 200)).toBe(true);
    expect(resumed).toBeGreaterThan(0);
    expect(readyMs).toBeLessThanOrEqual(10_000);
    expect(report.violations).toEqual([]);
    expect(restocked.status).toBe(503);
    expect(restocked.receivedAt).toBeLessThan(restartAt);
  }, 180_000);
});
