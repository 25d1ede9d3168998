import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';
import { lockOwners } from '../support/fault-books.js';
import { waitFor } from '../support/wait-for.js';

const STOCK = 1_500;
// Long leases: a lock the draining instance failed to release would still be there to see.
const LOCK_TTL_MS = 30_000;

/** Epoch ms of the first log line with this message, from pino's JSON lines. */
function loggedAt(output: string[], message: string): number | undefined {
  for (const line of output.join('\n').split('\n')) {
    if (!line.includes(`"msg":"${message}`)) continue;
    const time = /"time":(\d+)/.exec(line);
    if (time) return Number(time[1]);
  }
  return undefined;
}

describe('fault: SIGTERM to an instance under load', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    // The instance to be stopped spends 150 ms in each critical section: it has orders in flight, holding locks.
    bench = await FaultBench.withSlowVictim(LOCK_TTL_MS, 150);
  });
  afterAll(() => bench?.teardown());

  it('finishes in-flight orders, accepts no new ones, releases its locks and exits 0', async () => {
    const sku = await bench.createSku(STOCK, 8);
    const leaving = bench.victim;
    const load = bench.load(sku);
    expect(await load.untilAcknowledged(STOCK * 0.3)).toBe(true);

    const exited = once(leaving.child, 'exit');
    const signalledAt = Date.now();
    leaving.child.kill('SIGTERM');
    const [exitCode] = await exited;
    // Whatever it held when it left: a lock it kept would keep its owner, while the others turn theirs over in ms.
    const first = await lockOwners(bench.inspector);
    await sleep(500);
    const left = [...(await lockOwners(bench.inspector))].filter(([key, owner]) => first.get(key) === owner);

    const report = await bench.finish('graceful SIGTERM', sku, load);
    // Once the load is done, every lock is released (not left to expire: the leases are 30 s).
    const locksReleasedMs = await waitFor(async () => (await lockOwners(bench.inspector)).size === 0, 5_000, 20);

    const toLeaving = load.attempts.filter((a) => a.target === leaving.url);
    const inFlight = toLeaving.filter((a) => a.sentAt < signalledAt && a.receivedAt > signalledAt);
    const drainingSince = loggedAt(leaving.output, 'shutting down');
    const afterDrainStarted = toLeaving.filter((a) => drainingSince !== undefined && a.sentAt > drainingSince);
    console.log(
      `[fault] graceful SIGTERM: ${JSON.stringify({
        exitCode,
        inFlightAtSignal: inFlight.length,
        inFlightStatuses: [...new Set(inFlight.map((a) => a.status))],
        sentWhileDraining: afterDrainStarted.length,
        locksLeftBehind: left.length,
        locksReleasedMs,
      })}`,
    );

    expect(exitCode).toBe(0);
    expect(drainingSince).toBeDefined();
    expect(inFlight.length).toBeGreaterThan(0);
    // No request sent before the signal lost its connection, and the orders it was working on got their real answer.
    // A request the client sent just before the signal may reach the instance only after it began draining: that one
    // rightly gets "shutting down" (and the books below show it placed nothing), so the client's clock cannot say
    // which requests were in flight on the server; the 150 ms critical sections make sure some were.
    expect(inFlight.filter((a) => a.status === 0)).toEqual([]);
    expect(inFlight.filter((a) => a.status === 201).length).toBeGreaterThan(0);
    expect(inFlight.every((a) => [200, 201, 409].includes(a.status) || a.code === 'shutting_down')).toBe(true);
    // Nothing sent once it was draining was placed there.
    expect(afterDrainStarted.filter((a) => a.status === 201 || a.status === 200)).toEqual([]);
    expect(left).toEqual([]);
    expect(locksReleasedMs).toBeLessThan(Infinity);
    expect(report.violations).toEqual([]);
    expect(await bench.fleet.readyWithin(10_000)).toBeLessThanOrEqual(10_000);
  }, 180_000);
});
