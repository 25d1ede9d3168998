import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { insertSku } from '../../src/stock/stock.repository.js';
import { readSegmentStates } from '../../src/orders/batch-statements.js';
import { BatchWriter } from '../../src/orders/order-writes.js';
import { FENCE_GUARD, writeBatchStatement } from '../../src/orders/batch-statements.js';
import { type SegmentLocks, segmentKey } from '../../src/inventory/segment-locks.js';
import type { LockLease } from '../../src/lock/distributed-lock.js';
import { type CriticalSection, findConcurrentEffectiveWriters } from '../support/lock-history.js';
import { segmentLocksProcess } from '../support/segment-locks.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

/**
 * Test-only build of the service's batch statement without its fencing guard (neither "the row still carries the
 * token seen at our read" nor "our token is newer"): a service whose fencing was forgotten, to prove that the checker
 * notices. Everything else is the statement the order path runs.
 */
const unfencedStatement = {
  name: 'write_batch_unfenced',
  text: writeBatchStatement.text.replace(FENCE_GUARD, 'true'),
};

const SECTIONS = 10_000;
/** Concurrent holders, each with its own lock client, as separate processes would be. */
const HOLDERS = 16;
const SEGMENTS = 4;
const LOCK_TTL_MS = 50;
/** Share of sections that stall between read and write for longer than the lease. */
const PAUSE_RATE = 0.04;
const INITIAL_STOCK = 1_000_000_000;

/**
 * Runs `SECTIONS` critical sections shaped like the order flow's — take the segment lock (or take the last section's
 * again), read the segment (stock and token), sometimes stall past the lease, commit one unit with the order flow's
 * writer running `statement`, let go with the next section's lock — from concurrent holders against the real lock in
 * Redis and the real schema in Postgres, and records each one. The holders share one writer, as an instance's batch
 * runners do: sections that commit at about the same time are written in one statement, a stalled holder's and the
 * next holder's of the same segment included.
 */
async function recordHistory(db: Db, statement: typeof writeBatchStatement) {
  const writer = new BatchWriter(db, statement);
  const { redisUrl } = testEndpoints();
  const holders = Array.from({ length: HOLDERS }, () => segmentLocksProcess(redisUrl, { ttlMs: LOCK_TTL_MS }));
  const sku = uniqueSku('checker');
  const row = await db.transaction().execute((trx) =>
    insertSku(trx, {
      sku,
      segmentShares: Array(SEGMENTS).fill(INITIAL_STOCK),
      totalStock: INITIAL_STOCK * SEGMENTS,
      maxPerCustomer: null,
    }),
  );
  const ref = { skuId: row.id, layoutVersion: row.layout_version };
  const history: CriticalSection[] = [];
  let [started, retaken] = [0, 0];

  const holder = async (lock: SegmentLocks) => {
    // The last section's lock, kept, as the order flow's batch runners keep theirs, until the next section's lock is
    // taken: taken again in that step when the next section wants the same segment, let go otherwise.
    let held = new Map<string, LockLease>();
    // Counted, not timed: a slow machine takes longer, never runs fewer (or more) sections.
    while (started < SECTIONS) {
      started++;
      const segment = Math.floor(Math.random() * SEGMENTS);
      const segmentRef = { sku, layoutVersion: ref.layoutVersion, segment };
      const last = held.get(segmentKey(segmentRef));
      const [taken] = await lock.tryAcquireAllHolding([segmentRef], held);
      held = new Map();
      const lease = taken ?? (await lock.acquire(segmentRef, Date.now() + 2_000));
      if (!lease) {
        started--;
        continue;
      }
      if (last && lease.owner === last.owner) retaken++;
      try {
        const [state] = await readSegmentStates(db, [{ ...ref, segment }]);
        const start = performance.now();
        const pausedMs = Math.random() < PAUSE_RATE ? LOCK_TTL_MS + Math.random() * 60 : 0;
        if (pausedMs > 0) await sleep(pausedMs);
        const end = performance.now();
        const written = await writer.write({
          segments: [
            {
              ...ref,
              segment,
              availableSeen: state!.available,
              fenceSeen: state!.fence,
              fence: lease.fence,
              limitClaimed: false,
            },
          ],
          orders: [
            {
              orderId: randomUUID(),
              skuId: ref.skuId,
              idempotencyKey: null,
              requestFingerprint: null,
              customerId: null,
              holdSeconds: null,
              takes: [{ segment: 0, quantity: 1 }],
              limitedSkuIds: [],
            },
          ],
        });
        const effective = written.placed.size > 0;
        history.push({ owner: lease.owner, segment, fence: lease.fence, start, end, effective, pausedMs });
      } finally {
        held.set(segmentKey(segmentRef), lease);
      }
    }
    await lock.releaseAll(held.values());
  };
  try {
    await Promise.all(holders.map((h) => holder(h.locks)));
  } finally {
    await Promise.all(holders.map((h) => h.close()));
  }

  const { left } = await db
    .selectFrom('stock_segments')
    .select((eb) => eb.fn.sum<string>('available').as('left'))
    .where('sku_id', '=', row.id)
    .executeTakeFirstOrThrow();
  const effectiveWrites = history.filter((s) => s.effective).length;
  const found = findConcurrentEffectiveWriters(history);
  const summary = {
    sections: history.length,
    pausedPastLease: history.filter((s) => s.pausedMs > 0).length,
    /** Sections whose lock was the last section's, taken again under a new token rather than released and acquired. */
    retaken,
    effective: effectiveWrites,
    violations: found.count,
    /** Units handed out by effective writes beyond what the stock went down by: what lost updates cost. */
    lostUpdates: effectiveWrites - (INITIAL_STOCK * SEGMENTS - Number(left)),
  };
  return { history, found, summary };
}

describe('lock-safety checker: no two effective writers on one segment at once', () => {
  let db: Db;
  beforeAll(() => {
    db = createDatabase(testEndpoints().databaseUrl, HOLDERS + 2);
  });
  afterAll(() => db.destroy());

  it('finds none with the service fencing guard, under pauses past the lease', async () => {
    const run = await recordHistory(db, writeBatchStatement);
    console.log(`[checker] service guard: ${JSON.stringify(run.summary)}`);
    expect(run.summary.sections).toBe(SECTIONS);
    expect(run.summary.pausedPastLease).toBeGreaterThan(0);
    expect(run.summary.retaken).toBeGreaterThan(0);
    expect(run.found.examples).toEqual([]);
    expect(run.summary.lostUpdates).toBe(0);
  }, 600_000);

  it('finds violations in a test-only build without the fencing guard: the checker can fail', async () => {
    const run = await recordHistory(db, unfencedStatement);
    console.log(`[checker] no guard: ${JSON.stringify(run.summary)}`);
    expect(run.summary.sections).toBe(SECTIONS);
    expect(run.found.count).toBeGreaterThan(0);
    // What it flags is real damage: units handed out twice.
    expect(run.summary.lostUpdates).toBeGreaterThan(0);
  }, 600_000);
});
