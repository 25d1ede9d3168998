import type { Db } from '../db/database.js';
import type { LockLease } from '../lock/distributed-lock.js';
import type { OrderItem, OrderRecord } from './order.repository.js';
import { type BatchLine, type BatchPlan, decideBatch, type PlannedSegment } from './batch-plan.js';
import { readSegmentStates } from './batch-statements.js';
import { BatchWriter } from './order-writes.js';
import { type OrderFields, type OrderWrite, type PlacedRow, type SegmentWrite } from './batch-statements.js';
import { type Ending, purchaseLimit, refused } from './outcome.js';
import type { RowState, SegmentMemory } from './segment-memory.js';
import type { SkuDirectory } from '../inventory/sku-directory.js';
import type { Outbox } from '../events/outbox.js';

/** What one order went through, for the metrics. */
export interface OrderTrace {
  /** Segment locks tried for it (a shared segment counts once per order). */
  segmentVisits: number;
  /** Time it spent waiting for a batch that could take it. */
  waitedMs: number;
}

/** Observers of the batches (metrics); every hook is optional and must not throw. */
export interface BatchHooks {
  /** A segment lock was tried. */
  onSegmentVisit?(): void;
  onLockBusy?(): void;
  onWait?(): void;
  onFencedOut?(): void;
  onLockLost?(): void;
  /** A batch wrote `orders` orders in one statement. */
  onBatch?(orders: number): void;
  /** A batch read `count` segment states from Postgres: those it could not recall. */
  onSegmentsRead?(count: number): void;
}

/**
 * A step run inside the hold of a batch's segments, after deciding and before writing (`Extensions.whileHeld`), given
 * a signal that fires when one of those leases is lost. Errors are ignored: the write is then tried as without it.
 */
export type WhileHeld = (lockLost: AbortSignal) => Promise<void>;

/** Told when a batch falls asleep in its business step, and when it wakes. */
export interface Napping {
  asleep(): void;
  awake(): void;
}

/** An order the batcher carries until it ends. */
export interface BatchOrder {
  readonly fields: OrderFields;
  lines: BatchLine[];
  readonly exclusiveBy: readonly string[];
  readonly ticket: number;
  readonly deadline: number;
  readonly trace: OrderTrace;
  queuedAt: number;
  end(ending: Ending): void;
  fail(error: unknown): void;
}

/**
 * What a batch does once it tried its locks, step by step: read what memory cannot recall (one query), decide every
 * order against that stock, run the business step, write everything in one fenced statement, answer each order. It
 * hands its locks back to the batcher, which releases them (without combining, in the round trip of its next
 * attempt). Orders it could not decide go back to the batcher.
 */
export class BatchSteps {
  private readonly writer: BatchWriter;

  constructor(
    private readonly db: Db,
    private readonly directory: SkuDirectory,
    private readonly memory: SegmentMemory,
    /** The load test's business step inside the segments' hold; none in the product. */
    private readonly whileHeld: WhileHeld | undefined,
    private readonly outbox: Outbox,
    private readonly hooks: BatchHooks,
  ) {
    this.writer = new BatchWriter(db);
  }

  /**
   * Runs the steps; every order of the batch ends, or is returned to go back in line (`retries`). The batch's locks
   * are still held when it returns (`held`, by segment key): its caller lets go of them, or takes them again for its
   * next attempt. `napping` is told when the batch falls asleep in its business step, holding its locks but no
   * connection and no CPU, and when it wakes.
   */
  async run(
    plan: BatchPlan<BatchOrder>,
    segments: PlannedSegment[],
    leases: (LockLease | null)[],
    napping?: Napping,
  ): Promise<{ retries: BatchOrder[]; held: Map<string, LockLease> }> {
    const leaseOf = new Map<string, LockLease>();
    for (const [i, lease] of leases.entries()) {
      this.hooks.onSegmentVisit?.();
      if (lease) leaseOf.set(segments[i]!.key, lease);
      else this.hooks.onLockBusy?.();
    }
    const started = Date.now();
    for (const { order, candidates } of plan.orders) {
      order.trace.segmentVisits += new Set(candidates.flat()).size;
      order.trace.waitedMs += started - order.queuedAt;
    }
    const open = new Set(plan.orders.map(({ order }) => order));
    const retries: BatchOrder[] = [];
    try {
      await this.decideAndWrite(plan, segments, leaseOf, { open, retries, napping });
    } catch (error) {
      for (const key of leaseOf.keys()) this.memory.forget(key);
      for (const order of open) order.fail(error);
    }
    return { retries, held: leaseOf };
  }

  private async decideAndWrite(
    plan: BatchPlan<BatchOrder>,
    segments: PlannedSegment[],
    leaseOf: Map<string, LockLease>,
    { open, retries, napping }: { open: Set<BatchOrder>; retries: BatchOrder[]; napping: Napping | undefined },
  ): Promise<void> {
    const end = (order: BatchOrder, ending: Ending) => {
      open.delete(order);
      order.end(ending);
    };
    const retry = (order: BatchOrder) => {
      open.delete(order);
      retries.push(order);
    };
    const states = await this.readStates(
      segments.filter((s) => leaseOf.has(s.key)),
      leaseOf,
    );
    const held = new Map([...states].map(([key, state]) => [key, state.available]));
    const decisions = decideBatch(plan, held, (key, entry) => this.memory.upperBound(key, entry));
    const taking: { order: BatchOrder; takes: { key: string; quantity: number }[] }[] = [];
    const short: { order: BatchOrder; ending: Ending }[] = [];
    for (const [i, decision] of decisions.entries()) {
      const { order } = plan.orders[i]!;
      if (decision.kind === 'take') taking.push({ order, takes: decision.takes });
      else if (decision.kind === 'out_of_stock') short.push({ order, ending: refused(decision.problem) });
      else {
        for (const line of decision.widen) line.wantsEvery = true;
        retry(order);
      }
    }
    // Out of stock is final only once the orders decided before it took what they were given: one left out by the
    // fence, its key or its customer's limit gives its units back to those after it.
    const endShort = (final: boolean) => {
      for (const s of short) {
        if (final) end(s.order, s.ending);
        else retry(s.order);
      }
    };
    if (taking.length === 0) return endShort(true);

    const used = [...new Set(taking.flatMap(({ takes }) => takes.map((t) => t.key)))];
    const usedLeases = used.map((key) => leaseOf.get(key)!);
    if (this.whileHeld) {
      // The business steps of the orders taken are independent of each other: one step for the batch.
      const lockLost = AbortSignal.any(usedLeases.map((lease) => lease.signal));
      napping?.asleep();
      await this.whileHeld(lockLost)
        .catch(() => undefined)
        .finally(() => napping?.awake());
    }
    if (usedLeases.some((lease) => lease.lost)) {
      // The watchdog could not keep a lease: do not even try the write (the fence would refuse it anyway).
      this.hooks.onLockLost?.();
      for (const key of used) this.memory.forget(key);
      for (const { order } of taking) retry(order);
      return endShort(false);
    }

    const index = new Map(used.map((key, i) => [key, i]));
    const planned = new Map(segments.map((s) => [s.key, s]));
    const segmentWrites: SegmentWrite[] = used.map((key) => {
      const { entry, ref } = planned.get(key)!;
      const state = states.get(key)!;
      return {
        skuId: entry.id,
        layoutVersion: entry.layoutVersion,
        segment: ref.segment,
        availableSeen: state.available,
        fenceSeen: state.fence,
        fence: leaseOf.get(key)!.fence,
        limitClaimed: entry.maxPerCustomer !== null,
      };
    });
    const orderWrites: OrderWrite[] = taking.map(({ order, takes }) => ({
      ...order.fields,
      skuId: order.lines.length === 1 ? order.lines[0]!.entry.id : null,
      takes: takes.map((t) => ({ segment: index.get(t.key)!, quantity: t.quantity })),
      limitedSkuIds: order.lines.filter((l) => l.entry.maxPerCustomer !== null).map((l) => l.entry.id),
    }));
    const result = await this.writer.write({
      segments: segmentWrites,
      orders: orderWrites,
      events: this.outbox.enabled,
    });
    this.hooks.onBatch?.(result.placed.size);

    const takenFrom = new Map<string, number>();
    for (const { order, takes } of taking) {
      if (!result.placed.has(order.fields.orderId)) continue;
      for (const t of takes) takenFrom.set(t.key, (takenFrom.get(t.key) ?? 0) + t.quantity);
    }
    for (const [i, key] of used.entries()) {
      const lease = leaseOf.get(key)!;
      const { entry, ref } = planned.get(key)!;
      if (!result.written.has(i)) {
        // Refused by the fence, or by a per-customer limit set since this instance looked: look at the SKU afresh.
        this.memory.forget(key);
        this.hooks.onFencedOut?.();
        this.directory.invalidate(entry);
        continue;
      }
      const available = states.get(key)!.available - (takenFrom.get(key) ?? 0);
      this.memory.remember(key, lease, { available, fence: lease.fence }, entry);
      if (available === 0) this.directory.markEmpty(entry, ref.segment);
    }
    for (const { order, takes } of taking) {
      const row = result.placed.get(order.fields.orderId);
      const limit = result.overLimit.get(order.fields.orderId);
      if (row) end(order, { outcome: 'placed', order: recordOf(order, takes, row, planned) });
      else if (limit) {
        const sku = order.lines.find((line) => line.entry.id === limit.skuId)!.entry.sku;
        end(order, refused(purchaseLimit(sku, limit.remaining)));
      } else if (takes.every((t) => result.written.has(index.get(t.key)!))) end(order, { outcome: 'key_taken' });
      else retry(order);
    }
    endShort(taking.every(({ order }) => result.placed.has(order.fields.orderId)));
  }

  /**
   * The state of each held segment: recalled where this instance was its last holder, the rest read in one query.
   * A segment missing from Postgres belongs to an outdated layout: its SKU is looked up again.
   */
  private async readStates(held: PlannedSegment[], leaseOf: Map<string, LockLease>) {
    const states = new Map<string, RowState>();
    const unknown: PlannedSegment[] = [];
    for (const segment of held) {
      const recalled = this.memory.recall(segment.key, leaseOf.get(segment.key)!, segment.entry, segment.ref.segment);
      if (recalled) states.set(segment.key, recalled);
      else unknown.push(segment);
    }
    if (unknown.length > 0) this.hooks.onSegmentsRead?.(unknown.length);
    const read = await readSegmentStates(
      this.db,
      unknown.map((s) => ({ skuId: s.entry.id, layoutVersion: s.entry.layoutVersion, segment: s.ref.segment })),
    );
    for (const [i, segment] of unknown.entries()) {
      const state = read[i];
      if (!state) {
        this.directory.invalidate(segment.entry);
        continue;
      }
      states.set(segment.key, state);
      this.memory.remember(segment.key, leaseOf.get(segment.key)!, state, segment.entry);
      if (state.available === 0) this.directory.markEmpty(segment.entry, segment.ref.segment);
    }
    return states;
  }
}

/** The order as answered: its items per SKU, in SKU order, with the segments each took from. */
function recordOf(
  order: BatchOrder,
  takes: { key: string; quantity: number }[],
  row: PlacedRow,
  planned: Map<string, PlannedSegment>,
): OrderRecord {
  const items: OrderItem[] = order.lines
    .map((line) => {
      const mine = takes.filter((t) => planned.get(t.key)!.entry.sku === line.entry.sku);
      return {
        sku: line.entry.sku,
        quantity: line.quantity,
        deductions: mine.map((t) => ({ segment: planned.get(t.key)!.ref.segment, quantity: t.quantity })),
      };
    })
    .sort((a, b) => (a.sku < b.sku ? -1 : a.sku > b.sku ? 1 : 0));
  const { fields } = order;
  return {
    id: fields.orderId,
    status: row.status,
    customerId: fields.customerId,
    items,
    idempotencyKey: fields.idempotencyKey,
    requestFingerprint: fields.requestFingerprint,
    createdAt: row.createdAt,
    expiresAt: row.expiresAt,
  };
}
