import type { Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database } from '../db/schema.js';
import { claimUnits, releaseUnits } from '../inventory/customer-holdings.repository.js';
import { StatementCombiner } from '../db/statement-combiner.js';
import {
  type BatchWrite,
  type BatchWritten,
  type OrderWrite,
  runWrite,
  type SegmentWrite,
} from './batch-statements.js';

/**
 * Writes a batch: one statement, in a transaction only when some order must first claim its customer's units of a
 * limited SKU. Claims refused leave their orders out; claims of orders that were then not written (a refused fence,
 * a lost key) are given back before the transaction commits.
 */
export async function writeBatch(db: Db, batch: BatchWrite): Promise<BatchWritten> {
  if (batch.orders.every((order) => order.limitedSkuIds.length === 0)) {
    return { ...(await runWrite(db, batch)), overLimit: new Map() };
  }
  return db.transaction().execute(async (trx) => {
    const { granted, overLimit } = await claimLimits(trx, batch);
    const claimed = batch.orders.filter((order) => !overLimit.has(order.orderId));
    const result = await runWrite(trx, { segments: batch.segments, orders: claimed });
    for (const order of batch.orders) {
      if (result.placed.has(order.orderId)) continue;
      for (const skuId of granted.get(order.orderId) ?? []) {
        await releaseUnits(trx, skuId, order.customerId!, unitsOf(order, batch.segments, skuId));
      }
    }
    return { ...result, overLimit };
  });
}

/** Most batches one statement writes together. */
const MAX_BATCHES_PER_STATEMENT = 32;
/**
 * Statements of one instance's batches that run at once before the next batches wait to be written together: two keep
 * Postgres busy with one while the other's answer travels back; more would split the waiting batches over more
 * commits (measured in docs/scaling.md, "Measured choices inside the order path").
 */
const STATEMENTS_AT_ONCE = 2;

/**
 * The order batches' writer: a batch is written at once while fewer than `STATEMENTS_AT_ONCE` statements run; the
 * batches that arrive meanwhile wait, and the next statement writes them together. Each batch is combined already, but
 * only within its own segments: without combining, or with a long business step, several runners each write a small
 * batch at about the same moment, and every statement costs a round trip, a commit and the CPU to send and read it. A
 * batch that claims per-customer limits runs its own transaction, as `writeBatch` does.
 */
export class BatchWriter {
  private readonly combined: StatementCombiner<BatchWrite, Omit<BatchWritten, 'overLimit'>>;

  constructor(private readonly db: Db) {
    const write = (batches: BatchWrite[]) => writeTogether(db, batches);
    this.combined = new StatementCombiner(write, MAX_BATCHES_PER_STATEMENT, STATEMENTS_AT_ONCE);
  }

  async write(batch: BatchWrite): Promise<BatchWritten> {
    if (batch.orders.some((order) => order.limitedSkuIds.length > 0)) return writeBatch(this.db, batch);
    return { ...(await this.combined.run(batch)), overLimit: new Map() };
  }
}

/**
 * Batches of one instance's runners in as few statements as their segments allow: one, unless two batches write the
 * same segment. That happens only when a holder's lease ran out and a runner of this instance took the segment next:
 * in one statement both would pass the fence, read before either wrote, so the later batch goes into the next
 * statement, where the fence judges it against the row the earlier one wrote.
 */
async function writeTogether(db: Db, batches: BatchWrite[]): Promise<Omit<BatchWritten, 'overLimit'>[]> {
  const results = new Map<BatchWrite, Omit<BatchWritten, 'overLimit'>>();
  const keysOf = (batch: BatchWrite) => batch.segments.map((s) => `${s.skuId}:${s.layoutVersion}:${s.segment}`);
  for (let rest = batches; rest.length > 0;) {
    const now: BatchWrite[] = [];
    const later: BatchWrite[] = [];
    const seen = new Set<string>();
    for (const batch of rest) {
      const keys = keysOf(batch);
      if (keys.some((key) => seen.has(key))) later.push(batch);
      else {
        for (const key of keys) seen.add(key);
        now.push(batch);
      }
    }
    const written = await writeMerged(db, now);
    now.forEach((batch, k) => results.set(batch, written[k]!));
    rest = later;
  }
  return batches.map((batch) => results.get(batch)!);
}

/** One statement for batches on distinct segments; each batch's own part of the result. */
async function writeMerged(db: Db, batches: BatchWrite[]) {
  if (batches.length === 1) return [await runWrite(db, batches[0]!)];
  const offsets: number[] = [];
  let offset = 0;
  for (const batch of batches) {
    offsets.push(offset);
    offset += batch.segments.length;
  }
  const merged = await runWrite(db, {
    segments: batches.flatMap((batch) => batch.segments),
    orders: batches.flatMap((batch, k) =>
      batch.orders.map((order) => ({
        ...order,
        takes: order.takes.map((t) => ({ segment: t.segment + offsets[k]!, quantity: t.quantity })),
      })),
    ),
    events: batches[0]!.events,
  });
  return batches.map((batch, k) => ({
    written: new Set(batch.segments.flatMap((_, i) => (merged.written.has(i + offsets[k]!) ? [i] : []))),
    placed: new Map(
      batch.orders.flatMap((order) => {
        const row = merged.placed.get(order.orderId);
        return row ? [[order.orderId, row] as const] : [];
      }),
    ),
  }));
}

/**
 * Claims each limited order's units, one statement per SKU (an order's customer appears once per SKU in a batch). An
 * order refused on one SKU claims nothing further; what it was granted on others is given back by the caller.
 */
async function claimLimits(trx: Transaction<Database>, batch: BatchWrite) {
  const granted = new Map<string, number[]>();
  const overLimit: BatchWritten['overLimit'] = new Map();
  for (const skuId of new Set(batch.orders.flatMap((order) => order.limitedSkuIds))) {
    const claiming = batch.orders.filter((o) => o.limitedSkuIds.includes(skuId) && !overLimit.has(o.orderId));
    const refused = await claimUnits(
      trx,
      skuId,
      claiming.map((order) => ({ customerId: order.customerId!, units: unitsOf(order, batch.segments, skuId) })),
    );
    for (const order of claiming) {
      const remaining = refused.get(order.customerId!);
      if (remaining !== undefined) overLimit.set(order.orderId, { skuId, remaining });
      else granted.set(order.orderId, [...(granted.get(order.orderId) ?? []), skuId]);
    }
  }
  return { granted, overLimit };
}

function unitsOf(order: OrderWrite, segments: SegmentWrite[], skuId: number): number {
  return order.takes.reduce((total, t) => total + (segments[t.segment]!.skuId === skuId ? t.quantity : 0), 0);
}
