import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FaultBench } from '../support/fault-bench.js';
import { lockOwners } from '../support/fault-books.js';

const LOCK_TTL_MS = 1_000;
const STALL_MS = 2_500;
const STALLS = 3;
const STOCK = 4_500;

/** Locks that kept the owner they had in `before`, with their fencing tokens (both in the lock's hash). */
async function stillHeld(bench: FaultBench, before: Map<string, string>) {
  const held: { key: string; owner: string; token: number }[] = [];
  for (const [key, owner] of before) {
    const result = await bench.inspector.multi().hget(key, 'owner').hget(key, 'fence').exec();
    const [[, currentOwner], [, token]] = result as [[null, string | null], [null, string | null]];
    if (currentOwner === owner && token !== null) held.push({ key, owner, token: Number(token) });
  }
  return held;
}

/** `lock:{stock/sku/v1/3}` → the segment. */
function parseLockKey(key: string): { segment: number } {
  const match = /^lock:\{stock\/.+\/v\d+\/(\d+)\}$/.exec(key);
  if (!match) throw new Error(`unexpected lock key ${key}`);
  return { segment: Number(match[1]) };
}

describe('fault: a lock holder paused past its lease', () => {
  let bench: FaultBench;
  beforeAll(async () => {
    // The victim spends 250 ms inside each critical section, so a lock that keeps its owner for 200 ms while the
    // victim is frozen is the victim's: the others hold theirs for milliseconds.
    bench = await FaultBench.withSlowVictim(LOCK_TTL_MS, 250);
  });
  afterAll(() => bench?.teardown());

  it('lets another holder take the segment, refuses the stale holder its write, and keeps the stock exact', async () => {
    const sku = await bench.createSku(STOCK, 8);
    const victim = bench.victim;
    const load = bench.load(sku);
    const storedTokens = async () => {
      const { rows } = await sql<{ segment: number; fence_token: number }>`
        select segment, fence_token from stock_segments
         where sku_id = (select id from skus where sku = ${sku})`.execute(bench.db);
      return new Map(rows.map((r) => [r.segment, Number(r.fence_token)]));
    };
    /**
     * A lease the victim held while frozen. `pending`: it had not written yet (the segment's stored token was older).
     * `overtaken`: by the time it woke, a newer holder had written the segment, so its own write must be refused.
     */
    const stale: { segment: number; token: number; pending: boolean; takenOver: boolean; overtaken: boolean }[] = [];

    for (let stall = 1; stall <= STALLS; stall++) {
      expect(await load.untilAcknowledged((STOCK * stall) / (STALLS + 2))).toBe(true);
      victim.child.kill('SIGSTOP');
      // As a load balancer's health check would, stop sending it new requests; those it holds stay stuck.
      bench.fleet.takeOutOfRotation(victim);
      const before = await lockOwners(bench.inspector);
      await sleep(200);
      const held = await stillHeld(bench, before);
      const storedAtFreeze = await storedTokens();
      await sleep(STALL_MS - 200);
      const ownersAtWake = await lockOwners(bench.inspector);
      const storedAtWake = await storedTokens();
      for (const { key, owner, token } of held) {
        const { segment } = parseLockKey(key);
        stale.push({
          segment,
          token,
          pending: storedAtFreeze.get(segment)! < token,
          takenOver: ownersAtWake.get(key) !== owner,
          overtaken: storedAtWake.get(segment)! > token,
        });
      }
      victim.child.kill('SIGCONT');
      bench.fleet.returnToRotation(victim);
    }

    const refusable = stale.filter((s) => s.pending && s.overtaken);
    const report = await bench.finish('holder paused past its lease', sku, load, {
      staleLeases: stale.length,
      takenOver: stale.filter((s) => s.takenOver).length,
      staleWritesDue: refusable.length,
    });

    // Every stale write due after a newer holder had written must have been refused: no ledger row carries its token.
    const { rows: ledger } = await sql<{ segment: number; fence_token: number }>`
      select segment, fence_token from stock_deductions
       where sku_id = (select id from skus where sku = ${sku})`.execute(bench.db);
    const written = new Set(ledger.map((r) => `${r.segment}/${r.fence_token}`));
    const appliedStale = refusable.filter((s) => written.has(`${s.segment}/${s.token}`));

    expect(stale.some((s) => s.takenOver)).toBe(true);
    expect(refusable.length).toBeGreaterThan(0);
    expect(appliedStale).toEqual([]);
    expect(report.violations).toEqual([]);
    expect(await bench.fleet.readyWithin(10_000)).toBeLessThanOrEqual(10_000);
  }, 180_000);
});
