import type { Db } from '../db/database.js';
import type { OrderPlacementOptions } from './order-placement.js';
import { BUSY_ELSEWHERE_MS, type LockLease } from '../lock/distributed-lock.js';
import { type BatchPlan, planBatch } from './batch-plan.js';
import { type BatchHooks, type BatchOrder, BatchSteps, type Napping } from './batch-steps.js';
import { lockBusy, refused, refusalBeforeLocks, type Refused } from './outcome.js';
import { compareRefs, type SegmentLocks } from '../inventory/segment-locks.js';
import { SegmentMemory } from './segment-memory.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import { openSegments, refOf, segmentKeysOf, type SkuDirectory } from '../inventory/sku-directory.js';

/**
 * The instance's orders in flight, whatever their SKUs, placed in batches: plan the segments a batch needs, take
 * their locks in one round trip, read what memory cannot recall in one query, decide every order against that stock,
 * run the business step, write everything in one fenced statement, answer, release in one round trip. Up to
 * `batchesInFlight` batches run at once (those asleep in their business step aside), each on segments no other holds;
 * an order that finds no room waits for the next batch, so batches fill while others run.
 */
export class OrderBatcher {
  private readonly pending: BatchOrder[] = [];
  /** What this instance last saw of each segment: planning's guesses, and reads skipped when it held the lock last. */
  private readonly memory = new SegmentMemory();
  private readonly steps: BatchSteps;
  private running = 0;
  /** Runners whose batch sleeps in its business step (in-order runs are not runners, and are not counted). */
  private asleep = 0;
  private readonly runnerNapping: Napping = {
    asleep: () => {
      this.asleep++;
      // This runner no longer counts against the limit: another may plan meanwhile.
      if (this.pending.length > 0) this.kick();
    },
    awake: () => this.asleep--,
  };
  /** The last plan found no order it could take: every one left needs a segment held now. */
  private plannedNothing = false;
  private recheck: NodeJS.Timeout | undefined;
  /** The sets of SKUs (and layouts) whose orders are waiting for every segment in order. */
  private readonly inOrderRuns = new Set<string>();
  /** The SKUs of those runs, with how many runs wait for each: batches leave their segments alone meanwhile. */
  private readonly waitedFor = new Map<string, number>();

  constructor(
    db: Db,
    private readonly locks: SegmentLocks,
    private readonly directory: SkuDirectory,
    private readonly clock: SharedClock,
    private readonly options: OrderPlacementOptions,
    private readonly hooks: BatchHooks = {},
  ) {
    this.steps = new BatchSteps(db, directory, this.memory, options.whileHeld, options.outbox, hooks);
  }

  /** Queues the order for the next batch that can take it, in the order of its ticket (SegmentLocks.ticket). */
  enqueue(order: BatchOrder): void {
    order.queuedAt = Date.now();
    let at = this.pending.length;
    while (at > 0 && this.pending[at - 1]!.ticket > order.ticket) at--;
    this.pending.splice(at, 0, order);
    this.kick();
  }

  /**
   * Runners that plan, lock, read or write: at most `batchesInFlight` (the order path's Postgres connections). One
   * whose batch sleeps in its business step does not count meanwhile, so a long step does not cap the segments held.
   */
  private get active(): number {
    return this.running - this.asleep;
  }

  /**
   * Starts another batch runner if fewer than `batchesInFlight` are active. Beyond that many runners in all (naps
   * counted), only while the last plan took orders: when it found none, a new runner would most likely find none
   * either, and a runner whose batch ends plans again anyway.
   */
  private kick(): void {
    const limit = this.options.batchesInFlight;
    if (this.active < limit && (this.running < limit || !this.plannedNothing)) {
      this.running++;
      setImmediate(() => void this.work());
    }
  }

  /**
   * One of the batch runners: takes batches while there are orders it can plan. Without combining it keeps its last
   * order's locks until it has planned the next: a segment the next order needs again is taken again in the round trip
   * that takes the others and lets go of the rest (SegmentLocks.tryAcquireAllHolding), rather than released and taken
   * back one round trip later.
   */
  private async work(): Promise<void> {
    let held = new Map<string, LockLease>();
    try {
      // A runner whose batch woke from its business step while others took its place leaves after that batch.
      while (this.active <= this.options.batchesInFlight) {
        this.reviewPending();
        this.startInOrderRuns();
        const plan = planBatch(this.pending, this.options.combineMaxBatch, {
          isFree: (key) => held.has(key) || this.locks.isFree(key),
          estimate: (key, entry, segment) => this.memory.peek(key, entry, segment),
          isWaitedFor: (entry) => this.waitedFor.has(entry.sku),
        });
        this.plannedNothing = plan.orders.length === 0;
        if (this.plannedNothing) return;
        const taken = new Set(plan.orders.map(({ order }) => order));
        this.pending.splice(0, this.pending.length, ...this.pending.filter((order) => !taken.has(order)));
        const segments = [...plan.segments.values()];
        const [refs, holding] = [segments.map((s) => s.ref), held];
        held = new Map();
        const leases = await this.locks.tryAcquireAllHolding(refs, holding).catch((error: unknown) => {
          for (const order of taken) order.fail(error);
          return null;
        });
        if (!leases) continue;
        const batch = await this.steps.run(plan, segments, leases, this.runnerNapping);
        held = batch.held;
        if (this.options.combineMaxBatch > 1) {
          // With combining, the locks are let go at once: the orders the batch answered come back during that round
          // trip and fill the next batch (planned at once, it would be smaller). Without combining there is no batch
          // to fill, and a segment the next order needs is never left idle.
          await this.locks.releaseAll(held.values());
          held = new Map();
        }
        // Back in line only now: planned by another runner while the batch's segments were still held, they would be
        // kept off them.
        this.requeue(batch.retries);
      }
    } finally {
      // A release that fails only leaves the lease to expire, never undoes an order.
      await this.locks.releaseAll(held.values());
      this.running--;
      if (this.running === 0 && this.pending.length > 0) this.recheckSoon();
    }
  }

  /**
   * Orders only every open segment of their SKUs can answer, some of them busy, wait for all those locks, taken in the
   * one global order (so they cannot deadlock each other or anyone), beside the batches. Orders for the same SKUs go
   * together, one such run per set of SKUs at a time: near a sell-out, when most orders need every segment, they then
   * queue for one acquisition rather than each for its own. Meanwhile this instance's batches leave those SKUs alone,
   * so that they do not keep taking the very segments the run waits for; orders for them go to the next run instead.
   */
  private startInOrderRuns(): void {
    const groups = new Map<string, BatchOrder[]>();
    for (const order of this.pending) {
      // Those that want every segment, and those for a SKU a run waits for: batches leave it alone meanwhile.
      if (!order.lines.some((line) => line.wantsEvery || this.waitedFor.has(line.entry.sku))) continue;
      const group = order.lines.map(({ entry }) => `${entry.sku}\u0000${entry.layoutVersion}`).join('\u0001');
      if (this.inOrderRuns.has(group)) continue;
      let members = groups.get(group);
      if (!members) groups.set(group, (members = []));
      if (members.length < this.options.combineMaxBatch) members.push(order);
    }
    for (const [group, members] of groups) {
      // Two orders that may not share a batch (same key, same limited customer) do not share this run either.
      const exclusive = new Set<string>();
      const orders = members.filter((order) => {
        if (order.exclusiveBy.some((value) => exclusive.has(value))) return false;
        for (const value of order.exclusiveBy) exclusive.add(value);
        return true;
      });
      for (const order of orders) this.pending.splice(this.pending.indexOf(order), 1);
      const skus = orders[0]!.lines.map((line) => line.entry.sku);
      this.inOrderRuns.add(group);
      for (const sku of skus) this.waitedFor.set(sku, (this.waitedFor.get(sku) ?? 0) + 1);
      void this.runInOrder(orders).finally(() => {
        this.inOrderRuns.delete(group);
        for (const sku of skus) {
          const runs = this.waitedFor.get(sku)! - 1;
          if (runs === 0) this.waitedFor.delete(sku);
          else this.waitedFor.set(sku, runs);
        }
        if (this.pending.length > 0) this.kick();
      });
    }
  }

  private async runInOrder(orders: BatchOrder[]): Promise<void> {
    const plan: BatchPlan<BatchOrder> = { segments: new Map(), bySku: new Map(), orders: [] };
    for (const order of orders) {
      const candidates = order.lines.map((line) => {
        const keys = segmentKeysOf(line.entry);
        return openSegments(line.entry).map((segment) => {
          const key = keys[segment]!;
          if (!plan.segments.has(key))
            plan.segments.set(key, { ref: refOf(line.entry, segment), key, entry: line.entry, left: 0 });
          return key;
        });
      });
      plan.orders.push({ order, candidates, covers: candidates.map(() => true) });
    }
    const segments = [...plan.segments.values()].sort((a, b) => compareRefs(a.ref, b.ref));
    const deadline = Math.min(...orders.map((order) => order.deadline));
    try {
      const leases = await this.locks.acquireInOrder(
        segments.map((s) => s.ref),
        deadline,
        orders[0]!.ticket,
      );
      if (!leases) {
        // Out of time for the first of them: back in line, where those out of time are refused (reviewPending).
        return this.requeue(orders);
      }
      const batch = await this.steps.run(plan, segments, leases);
      await this.locks.releaseAll(batch.held.values());
      // Back in line only now: planned while the run still held its segments, they would be kept off them.
      this.requeue(batch.retries);
    } catch (error) {
      for (const order of orders) order.fail(error);
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
   * Goes over the waiting orders before a batch is planned. Ends those no batch will take: past their wait budget,
   * for a SKU whose sale closed while they waited (so nothing is placed after the close), or for a SKU whose every
   * segment turned out empty meanwhile (read as 0 under its lock, so no release would bring them stock). Sends those
   * whose SKU's entry went stale meanwhile (a change notice, or the notice subscription coming back) to be looked up
   * again: planning cannot trust a stale entry's empty marks, and no batch would ever take such an order back.
   */
  private reviewPending(): void {
    const now = Date.now();
    const shared = this.clock.now();
    const lapsed = (order: BatchOrder): Refused | undefined =>
      order.deadline <= now
        ? lockBusy(this.options.lockWaitMs)
        : refusalBeforeLocks(order.lines, order.fields.customerId, shared);
    for (let i = 0; i < this.pending.length;) {
      const order = this.pending[i]!;
      const refusal = lapsed(order);
      if (refusal) order.end(refused(refusal));
      else if (order.lines.some((line) => line.entry.stale)) this.retry(order);
      else {
        i++;
        continue;
      }
      this.pending.splice(i, 1);
    }
  }

  /**
   * Every order left needs a segment another process (or a run or the stock admin here) holds: plan again shortly, by
   * when a segment found held elsewhere is tried again anyway. A timer, not a release notice: the notices wake the
   * callers waiting for a lock in line, and taking one here would leave one of them asleep.
   */
  private recheckSoon(): void {
    if (this.recheck) return;
    this.hooks.onWait?.();
    this.recheck = setTimeout(() => {
      this.recheck = undefined;
      if (this.pending.length > 0) this.kick();
    }, BUSY_ELSEWHERE_MS);
  }
}
