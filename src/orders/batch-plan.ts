import type { SegmentRef } from '../inventory/segment-locks.js';
import { splitAcross } from '../inventory/segment-math.js';
import { openSegments, refOf, segmentKeysOf, type SkuEntry } from '../inventory/sku-directory.js';
import { outOfStock, type Refused } from './outcome.js';

/**
 * The two pure halves of a batch, no I/O here: which segments a batch of orders needs (`planBatch`), and, once their
 * locks are held and their stock read, what each order takes (`decideBatch`).
 */

/** One line of an order: units of one SKU. */
export interface BatchLine {
  entry: SkuEntry;
  quantity: number;
  /** Set after the line could not be covered from the segments its batch held: next time, it wants every one. */
  wantsEvery: boolean;
}

/** An order as planning sees it. */
export interface PlannableOrder {
  readonly lines: readonly BatchLine[];
  /** Values no two orders of one batch may share: its Idempotency-Key, and its customer on a limited SKU. */
  readonly exclusiveBy: readonly string[];
}

/** A segment the batch locks, with what this instance last knew of its stock (Infinity: nothing). */
export interface PlannedSegment {
  readonly ref: SegmentRef;
  readonly key: string;
  readonly entry: SkuEntry;
  /** Units the orders planned onto it may still take, as far as planning can tell. */
  left: number;
}

export interface BatchPlan<O extends PlannableOrder> {
  segments: Map<string, PlannedSegment>;
  /** The same segments by SKU entry: where a line looks for a segment to share. */
  bySku: Map<SkuEntry, PlannedSegment[]>;
  /**
   * Orders in arrival order, each with its candidate segments (keys) per line, and per line whether those are a cover
   * (every free segment of the SKU, because none was known to hold enough alone).
   */
  orders: { order: O; candidates: string[][]; covers: boolean[] }[];
}

/** What planning asks of the instance, by segment key (`segmentKey`). */
export interface PlanningView {
  /** True while orders of this instance wait for every segment of the SKU: batches leave its segments to them. */
  isWaitedFor?(entry: SkuEntry): boolean;
  /** False when a batch of this instance holds the segment, or another instance was just found holding it. */
  isFree(key: string): boolean;
  /** What this instance last knew the segment held (segment `segment` of `entry`); undefined when it never saw it. */
  estimate(key: string, entry: SkuEntry, segment: number): number | undefined;
}

/**
 * Picks the segments for up to `max` of the `pending` orders, oldest first. A line goes, in this order of preference,
 * onto a segment the batch already takes that still has room for it (the orders share the segment's lock hold and its
 * statement: flat combining), onto a free segment that may hold enough, or onto every free segment of its SKU, to be
 * covered from several. Orders that cannot be planned now (their segments are all taken, or they clash with an order
 * already in the batch) wait for the next batch.
 */
export function planBatch<O extends PlannableOrder>(
  pending: Iterable<O>,
  max: number,
  view: PlanningView,
): BatchPlan<O> {
  const plan: BatchPlan<O> = { segments: new Map(), bySku: new Map(), orders: [] };
  const exclusive = new Set<string>();
  // SKUs with no segment this plan could use: every later line of theirs is skipped at once. Orders waiting for a
  // SKU whose segments are all held are the usual backlog, and a plan must not cost their number × its segments.
  const full = new Set<SkuEntry>();
  for (const order of pending) {
    if (plan.orders.length >= max) break;
    if (order.exclusiveBy.some((value) => exclusive.has(value))) continue;
    const candidates: string[][] = [];
    const covers: boolean[] = [];
    const added: PlannedSegment[] = [];
    for (const line of order.lines) {
      const picked = full.has(line.entry) ? null : pickSegments(line, plan, view, added, full);
      if (!picked) break;
      candidates.push(picked.keys);
      covers.push(picked.cover);
    }
    if (candidates.length < order.lines.length) {
      for (const segment of added) {
        plan.segments.delete(segment.key);
        const ofSku = plan.bySku.get(segment.entry)!;
        ofSku.splice(ofSku.indexOf(segment), 1);
      }
      continue;
    }
    for (const value of order.exclusiveBy) exclusive.add(value);
    plan.orders.push({ order, candidates, covers });
  }
  return plan;
}

function pickSegments<O extends PlannableOrder>(
  line: BatchLine,
  plan: BatchPlan<O>,
  view: PlanningView,
  added: PlannedSegment[],
  full: Set<SkuEntry>,
): { keys: string[]; cover: boolean } | null {
  const { entry, quantity } = line;
  if (view.isWaitedFor?.(entry)) return null;
  const keys = segmentKeysOf(entry);
  const open = openSegments(entry);
  const take = (segment: number): PlannedSegment => {
    const key = keys[segment]!;
    let planned = plan.segments.get(key);
    if (!planned) {
      planned = { ref: refOf(entry, segment), key, entry, left: view.estimate(key, entry, segment) ?? Infinity };
      plan.segments.set(key, planned);
      let ofSku = plan.bySku.get(entry);
      if (!ofSku) plan.bySku.set(entry, (ofSku = []));
      ofSku.push(planned);
      added.push(planned);
    }
    return planned;
  };
  if (!line.wantsEvery) {
    const shared = plan.bySku.get(entry)?.find((planned) => planned.left >= quantity);
    if (shared) {
      shared.left -= quantity;
      return { keys: [shared.key], cover: false };
    }
    // From a random segment on, the first free one that may hold enough: orders spread over the segments.
    const start = Math.floor(Math.random() * open.length);
    for (let i = 0; i < open.length; i++) {
      const segment = open[(start + i) % open.length]!;
      const key = keys[segment]!;
      if (plan.segments.has(key) || !view.isFree(key) || (view.estimate(key, entry, segment) ?? Infinity) < quantity)
        continue;
      const chosen = take(segment);
      chosen.left -= quantity;
      return { keys: [chosen.key], cover: false };
    }
  }
  const usable = open.filter((segment) => plan.segments.has(keys[segment]!) || view.isFree(keys[segment]!));
  // None free and none in the plan: no later order of this plan can add one either.
  if (usable.length === 0) full.add(entry);
  if (usable.length === 0 || (line.wantsEvery && usable.length < open.length)) return null;
  const cover = usable.map((segment) => {
    const planned = take(segment);
    planned.left = 0;
    return planned.key;
  });
  return { keys: cover, cover: true };
}

/** What the batch holds of a segment: its stock as read under the lock, less what earlier orders took. */
export type Holdings = Map<string, number>;

/** What deciding made of one order. */
export type Decision =
  | { kind: 'take'; takes: { key: string; quantity: number }[] }
  /** Definitively short: the segments held, with those not held provably unable to make up the rest, fall short. */
  | { kind: 'out_of_stock'; problem: Refused }
  /**
   * Not decided by what this batch holds: some of its segments were busy, or they fell short while other segments may
   * hold enough. `widen`: the lines that should want every segment of their SKU next time.
   */
  | { kind: 'retry'; widen: BatchLine[] };

/**
 * Decides the orders in arrival order against the stock held: a line takes from one segment if one suffices, else
 * it is split across its candidates. An order takes all its lines or nothing; what it takes is gone for the orders
 * after it. `held` is updated.
 */
export function decideBatch<O extends PlannableOrder>(
  plan: BatchPlan<O>,
  held: Holdings,
  /** At most what a segment the batch does not hold has now, where provable (`SegmentMemory.upperBound`). */
  upperBound: (key: string, entry: SkuEntry) => number | undefined = () => undefined,
): Decision[] {
  return plan.orders.map(({ order, candidates, covers }) => {
    const takes: { key: string; quantity: number }[] = [];
    let retry = false;
    const widen: BatchLine[] = [];
    let short: Decision | undefined;
    for (const [i, line] of order.lines.entries()) {
      // Its own candidates first, then any segment of the SKU the batch holds for other orders.
      const keys = segmentKeysOf(line.entry);
      const ofSku = openSegments(line.entry)
        .map((segment) => keys[segment]!)
        .filter((key) => held.has(key));
      const fits = (key: string) => held.has(key) && held.get(key)! >= line.quantity;
      const alone = candidates[i]!.find(fits) ?? ofSku.find(fits);
      const split = alone
        ? [{ segment: alone, quantity: line.quantity }]
        : splitAcross(
            ofSku.map((key) => ({ segment: key, available: held.get(key)! })),
            line.quantity,
          );
      if (split) {
        takes.push(...split.map((t) => ({ key: t.segment, quantity: t.quantity })));
        continue;
      }
      // Definitive when the batch holds every open segment, or those it does not hold provably cannot make up the rest.
      const available = ofSku.reduce((total, key) => total + held.get(key)!, 0);
      const elsewhere = openSegments(line.entry)
        .map((segment) => keys[segment]!)
        .filter((key) => !held.has(key))
        .reduce((total, key) => total + (upperBound(key, line.entry) ?? Infinity), 0);
      if (available + elsewhere < line.quantity && !line.entry.stale) {
        short ??= { kind: 'out_of_stock', problem: outOfStock(line.entry.sku, line.quantity, available + elsewhere) };
      } else {
        retry = true;
        // A cover held every free segment of the SKU and they fell short, while the others were busy: only all of them
        // at once can answer it. (A single segment that fell short was a guess: the next plan knows better.)
        if (covers[i] && candidates[i]!.every((key) => held.has(key))) widen.push(line);
      }
    }
    if (short) return short;
    if (retry) return { kind: 'retry', widen };
    for (const { key, quantity } of takes) held.set(key, held.get(key)! - quantity);
    return { kind: 'take', takes };
  });
}
