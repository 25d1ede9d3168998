import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type Transaction } from 'kysely';
import type { Db } from '../../src/db/database.js';
import type { Database } from '../../src/db/schema.js';
import { type SegmentLocks, segmentKey } from '../../src/inventory/segment-locks.js';
import type { LockLease } from '../../src/lock/distributed-lock.js';
import { readSegmentStates, type SegmentState } from '../../src/orders/batch-statements.js';
import { BatchWriter } from '../../src/orders/order-writes.js';
import { expireReservations, giveBack } from '../../src/reservations/lifecycle.repository.js';
import { addToSegmentsFenced, deleteSegmentsFenced, insertSku } from '../../src/stock/stock.repository.js';
import { type CriticalSection, findConcurrentEffectiveWriters } from './lock-history.js';
import { segmentLocksProcess } from './segment-locks.js';
import { testEndpoints, uniqueSku } from './service.js';

/** Concurrent holders, each with its own lock client, as separate processes would be. */
const HOLDERS = 16;
const SEGMENTS = 4;
const LOCK_TTL_MS = 50;
/** Share of sections that stall between read and write for longer than the lease. */
const PAUSE_RATE = 0.04;
const INITIAL_STOCK = 1_000_000_000;

interface Section {
  db: Db;
  sku: { skuId: number; layoutVersion: number };
  segment: number;
  lease: LockLease;
  /** The segment as its holder read it under the lock, before any stall. */
  state: SegmentState;
}

/**
 * A writer of `stock_segments`, driven as its caller drives it: one unit, from a lock holder. `commits` says how its
 * writes must order: a write that stores what it read must never overlap another effective write of its segment;
 * a write that adds to the row (and runs in a transaction the checker commits) must never carry an older token than
 * one already committed on its row.
 */
export type StockWriter =
  | { name: string; stores: 'what it read'; write(section: Section, writer: BatchWriter): Promise<boolean> }
  | { name: string; stores: 'a change'; write(trx: Transaction<Database>, section: Section): Promise<boolean> };

/** Every writer of `stock_segments` in src/, each with the unit of work its caller gives it. */
export const stockWriters: StockWriter[] = [
  {
    name: 'the order batch (writeBatchStatement)',
    stores: 'what it read',
    async write({ sku, segment, lease, state }, writer) {
      const written = await writer.write({
        segments: [
          {
            ...sku,
            segment,
            availableSeen: state.available,
            fenceSeen: state.fence,
            fence: lease.fence,
            limitClaimed: false,
          },
        ],
        orders: [
          {
            orderId: randomUUID(),
            skuId: sku.skuId,
            idempotencyKey: null,
            requestFingerprint: null,
            customerId: null,
            holdSeconds: null,
            takes: [{ segment: 0, quantity: 1 }],
            limitedSkuIds: [],
          },
        ],
      });
      return written.placed.size > 0;
    },
  },
  {
    name: 'restock (addToSegmentsFenced)',
    stores: 'a change',
    async write(trx, { sku, segment, lease }) {
      return (await addToSegmentsFenced(trx, sku, [{ segment, fence: lease.fence, add: 1 }])) === 1;
    },
  },
  {
    name: 'a returned order (giveBack)',
    stores: 'a change',
    async write(trx, { sku, segment, lease }) {
      const orderId = randomUUID();
      await sql`insert into orders (id, sku_id, quantity, status) values (${orderId}, ${sku.skuId}, 1, 'cancelled')`.execute(
        trx,
      );
      const units = [{ ...sku, segment, quantity: 1, fence: lease.fence }];
      return (await giveBack(trx, orderId, 'cancelled', units)) === 1;
    },
  },
  {
    name: 'expired reservations (expireReservations)',
    stores: 'a change',
    async write(trx, { sku, segment, lease }) {
      const orderId = randomUUID();
      await sql`insert into orders (id, sku_id, quantity, status, expires_at)
                values (${orderId}, ${sku.skuId}, 1, 'reserved', now() - interval '1 second')`.execute(trx);
      await sql`insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
                values (${orderId}, ${sku.skuId}, ${segment}, ${sku.layoutVersion}, 1, ${lease.fence})`.execute(trx);
      const fences = [{ ...sku, segment, fence: lease.fence }];
      return (await expireReservations(trx, [orderId], fences, false)).written === 1;
    },
  },
  {
    name: 're-segmentation (deleteSegmentsFenced), putting the row back with its stock',
    stores: 'a change',
    async write(trx, { sku, segment, lease }) {
      const [removed] = await deleteSegmentsFenced(trx, sku, [{ segment, fence: lease.fence }]);
      if (!removed) return false;
      await sql`insert into stock_segments (sku_id, layout_version, segment, available, fence_token)
                values (${sku.skuId}, ${sku.layoutVersion}, ${segment}, ${removed.available}, ${lease.fence})`.execute(
        trx,
      );
      return true;
    },
  },
];

/** A recorded section, and for a writer that adds, the place of its commit among its segment's commits. */
type Recorded = CriticalSection & { committed?: number };

/**
 * Runs `sections` critical sections shaped like the order flow's — take the segment lock (or take the last section's
 * again), read the segment (stock and token), sometimes stall past the lease, write one unit with `writer`, let go
 * with the next section's lock — from concurrent holders against the real lock in Redis and the real schema in
 * Postgres, and records each one. The holders share one batch writer, as an instance's batch runners do: sections
 * that commit at about the same time are written in one statement, a stalled holder's and the next holder's of the
 * same segment included. Returns what the writer's rule forbids, found in the history: overlapping effective writes
 * of one segment for a writer that stores what it read, effective writes whose token is older than the one
 * committed before them on the row for a writer that adds.
 */
export async function recordHistory(db: Db, writer: StockWriter, sections: number) {
  const batchWriter = new BatchWriter(db);
  const { redisUrl } = testEndpoints();
  const holders = Array.from({ length: HOLDERS }, () => segmentLocksProcess(redisUrl, { ttlMs: LOCK_TTL_MS }));
  const skuName = uniqueSku('checker');
  const row = await db.transaction().execute((trx) =>
    insertSku(trx, {
      sku: skuName,
      segmentShares: Array(SEGMENTS).fill(INITIAL_STOCK),
      totalStock: INITIAL_STOCK * SEGMENTS,
      maxPerCustomer: null,
    }),
  );
  const sku = { skuId: row.id, layoutVersion: row.layout_version };
  await sql`create sequence if not exists lock_safety_commits`.execute(db);
  const history: Recorded[] = [];
  let [started, retaken] = [0, 0];

  const holder = async (lock: SegmentLocks) => {
    // The last section's lock, kept, as the order flow's batch runners keep theirs, until the next section's lock is
    // taken: taken again in that step when the next section wants the same segment, let go otherwise.
    let held = new Map<string, LockLease>();
    // Counted, not timed: a slow machine takes longer, never runs fewer (or more) sections.
    while (started < sections) {
      started++;
      const segment = Math.floor(Math.random() * SEGMENTS);
      const segmentRef = { sku: skuName, layoutVersion: sku.layoutVersion, segment };
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
        const [state] = await readSegmentStates(db, [{ ...sku, segment }]);
        const start = performance.now();
        const pausedMs = Math.random() < PAUSE_RATE ? LOCK_TTL_MS + Math.random() * 60 : 0;
        if (pausedMs > 0) await sleep(pausedMs);
        const section = { db, sku, segment, lease, state: state! };
        const recorded: Recorded = {
          owner: lease.owner,
          segment,
          fence: lease.fence,
          start,
          end: 0,
          effective: false,
          pausedMs,
        };
        if (writer.stores === 'what it read') {
          recorded.end = performance.now();
          recorded.effective = await writer.write(section, batchWriter);
        } else {
          await db.transaction().execute(async (trx) => {
            recorded.effective = await writer.write(trx, section);
            // The row stays locked by this transaction until it commits, so the next writer of the row draws later.
            if (recorded.effective) {
              const drawn = await sql<{ n: string }>`select nextval('lock_safety_commits') as n`.execute(trx);
              recorded.committed = Number(drawn.rows[0]!.n);
            }
            recorded.end = performance.now();
          });
        }
        history.push(recorded);
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
  const effective = history.filter((s) => s.effective);
  const found =
    writer.stores === 'what it read' ? findConcurrentEffectiveWriters(history) : findFallingTokens(effective);
  const summary = {
    sections: history.length,
    pausedPastLease: history.filter((s) => s.pausedMs > 0).length,
    /** Sections whose lock was the last section's, taken again under a new token rather than released and acquired. */
    retaken,
    effective: effective.length,
    violations: found.count,
    /** Units handed out by effective order writes beyond what the stock went down by: what lost updates cost. */
    lostUpdates:
      writer.stores === 'what it read' ? effective.length - (INITIAL_STOCK * SEGMENTS - Number(left)) : undefined,
  };
  return { history, found, summary };
}

/** Effective writes of a row, in the order they committed, whose token is not newer than the one committed before. */
function findFallingTokens(effective: readonly Recorded[]) {
  const bySegment = new Map<number, Recorded[]>();
  for (const section of effective) bySegment.set(section.segment, [...(bySegment.get(section.segment) ?? []), section]);
  const examples: { segment: number; first: Recorded; second: Recorded }[] = [];
  let count = 0;
  for (const [segment, sections] of bySegment) {
    sections.sort((a, b) => a.committed! - b.committed!);
    for (let k = 1; k < sections.length; k++) {
      if (sections[k]!.fence > sections[k - 1]!.fence) continue;
      count++;
      if (examples.length < 10) examples.push({ segment, first: sections[k - 1]!, second: sections[k]! });
    }
  }
  return { count, examples };
}
