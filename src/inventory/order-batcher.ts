import type { Db } from '../db/database.js';
import { type BatchPlan, openSegments, planBatch, type PlannedSegment, refOf } from './batch-plan.js';
import { type BatchHooks, type BatchOrder, BatchSteps, type Ending } from './batch-steps.js';
import { lockBusy, outOfStock } from './refusals.js';
import { compareRefs, type SegmentLocks, segmentKey } from './segment-locks.js';
import { SegmentMemory } from './segment-memory.js';
import type { SkuDirectory } from './sku-directory.js';

export interface BatcherOptions {
  lockWaitMs: number;
  /** Most orders in one batch (COMBINE_MAX_BATCH). */
  maxBatch: number;
  /** Batches running at once (BATCHES_IN_FLIGHT): each holds its own segments. */
  batchesInFlight: number;
  /** Benchmark knob: a simulated business step inside the segments' hold (CRITICAL_SECTION_DELAY_MS). */
  criticalSectionDelayMs: number;
}

/** How long a batcher that found every segment it needs held elsewhere waits for a release notice before looking again. */
const HELD_ELSEWHERE_RECHECK_MS = 20;

/**
 * The instance's orders in flight, whatever their SKUs, placed in batches: plan the segments a batch needs, take
 * their locks in one round trip, read what memory cannot recall in one query, decide every order against that stock,
 * run the business step, write everything in one fenced statement, answer, release in one round trip. Up to
 * `batchesInFlight` batches run at once, each on segments no other holds; an order that finds no room waits for the
 * next batch, so batches fill while others run.
 */
export class OrderBatcher {
  private readonly pending: BatchOrder[] = [];
  /** What this instance last saw of each segment: planning's guesses, and reads skipped when it held the lock last. */
  private readonly memory = new SegmentMemory();
  private readonly steps: BatchSteps;
  private running = 0;
  private waitingForRelease = false;

  constructor(
    db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    private readonly options: BatcherOptions,
    private readonly hooks: BatchHooks = {},
  ) {
    this.steps = new BatchSteps(db, locks, directory, this.memory, options.criticalSectionDelayMs, hooks);
  }

  /** Queues the order for the next batch that can take it. */
  submit(order: BatchOrder): void {
    this.enqueue(order);
  }

  /** An order's place in line, taken on arrival: batches take orders in this order, and so do waits for locks. */
  ticket(): number {
    return this.locks.ticket();
  }

  private enqueue(order: BatchOrder): void {
    order.queuedAt = Date.now();
    let at = this.pending.length;
    while (at > 0 && this.pending[at - 1]!.ticket > order.ticket) at--;
    this.pending.splice(at, 0, order);
    if (this.running < this.options.batchesInFlight) {
      this.running++;
      setImmediate(() => void this.work());
    }
  }

  /** One of the batch runners: takes batches while there are orders it can plan. */
  private async work(): Promise<void> {
    try {
      for (;;) {
        this.refuseLapsed();
        for (const order of this.pending.filter((o) => o.lines.some((line) => line.wantsEvery))) {
          this.pending.splice(this.pending.indexOf(order), 1);
          void this.runInOrder(order);
        }
        const plan = planBatch(this.pending, this.options.maxBatch, {
          isFree: (key) => this.locks.isFree(key),
          estimate: (key) => this.memory.peek(key),
        });
        if (plan.orders.length === 0) return;
        const taken = new Set(plan.orders.map(({ order }) => order));
        this.pending.splice(0, this.pending.length, ...this.pending.filter((order) => !taken.has(order)));
        const segments = [...plan.segments.values()];
        const leases = await this.locks.tryAcquireAll(segments.map((s) => s.ref)).catch((error: unknown) => {
          for (const order of taken) order.fail(error);
          return null;
        });
        if (leases) this.requeue(await this.steps.run(plan, segments, leases));
      }
    } finally {
      this.running--;
      if (this.running === 0 && this.pending.length > 0) void this.waitForRelease();
    }
  }

  /**
   * An order only every open segment of its SKU can answer, some of them busy: it waits for all their locks, taken in
   * the one global order (so it cannot deadlock another), beside the batches, then goes through the same steps as a
   * batch of its own.
   */
  private async runInOrder(order: BatchOrder): Promise<void> {
    const plan: BatchPlan<BatchOrder> = { segments: new Map(), bySku: new Map(), orders: [] };
    const candidates = order.lines.map((line) =>
      openSegments(line.entry).map((segment) => {
        const ref = refOf(line.entry, segment);
        const planned: PlannedSegment = { ref, key: segmentKey(ref), entry: line.entry, left: 0 };
        plan.segments.set(planned.key, planned);
        return planned.key;
      }),
    );
    plan.orders.push({ order, candidates });
    const segments = [...plan.segments.values()].sort((a, b) => compareRefs(a.ref, b.ref));
    try {
      const leases = await this.locks.acquireInOrder(
        segments.map((s) => s.ref),
        order.deadline,
        order.ticket,
      );
      if (!leases) return order.end({ kind: 'refused', problem: lockBusy(this.options.lockWaitMs) });
      this.requeue(await this.steps.run(plan, segments, leases));
    } catch (error) {
      order.fail(error);
    }
  }

  private requeue(orders: BatchOrder[]): void {
    for (const order of orders) this.retry(order);
  }

  /** Back in line, with its SKUs looked up again where their layout changed meanwhile. */
  private retry(order: BatchOrder): void {
    if (!order.lines.some((line) => line.entry.stale)) return this.enqueue(order);
    Promise.all(order.lines.map((line) => this.directory.get(line.entry.sku))).then(
      (entries) => {
        order.lines = order.lines.map((line, i) => ({
          entry: entries[i]!,
          quantity: line.quantity,
          wantsEvery: false,
        }));
        this.enqueue(order);
      },
      (error: unknown) => order.fail(error),
    );
  }

  /**
   * Ends the waiting orders no batch will take: those past their wait budget, and those for a SKU whose every segment
   * turned out empty meanwhile (read as 0 under its lock, so no release would bring them stock).
   */
  private refuseLapsed(): void {
    const now = Date.now();
    const lapsed = (order: BatchOrder): Ending | undefined => {
      if (order.deadline <= now) return { kind: 'refused', problem: lockBusy(this.options.lockWaitMs) };
      const gone = order.lines.find((line) => !line.entry.stale && openSegments(line.entry).length === 0);
      return gone && { kind: 'refused', problem: outOfStock(gone.entry.sku, gone.quantity, 0) };
    };
    for (let i = 0; i < this.pending.length;) {
      const ending = lapsed(this.pending[i]!);
      if (!ending) {
        i++;
        continue;
      }
      this.pending.splice(i, 1)[0]!.end(ending);
    }
  }

  /**
   * Every order left needs a segment another process (or the stock admin here) holds: wait for one of them to be
   * released, briefly, then plan again.
   */
  private async waitForRelease(): Promise<void> {
    if (this.waitingForRelease) return;
    this.waitingForRelease = true;
    try {
      const { entry } = this.pending[0]!.lines[0]!;
      const refs = openSegments(entry).map((segment) => refOf(entry, segment));
      const mark = this.locks.mark();
      await this.locks.listen(entry.sku, refs);
      this.hooks.onWait?.();
      if (refs.length > 0) {
        await this.locks.waitForRelease(refs, {
          ticket: this.pending[0]!.ticket,
          deadline: Date.now() + HELD_ELSEWHERE_RECHECK_MS,
          mark,
        });
      }
    } catch {
      // Notices only shorten the wait; planning again finds out what is free.
    } finally {
      this.waitingForRelease = false;
      if (this.running === 0 && this.pending.length > 0) {
        this.running++;
        void this.work();
      }
    }
  }
}
