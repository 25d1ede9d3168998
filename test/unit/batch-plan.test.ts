import { describe, expect, it } from 'vitest';
import {
  type BatchLine,
  decideBatch,
  type PlannableOrder,
  planBatch,
  type PlanningView,
} from '../../src/orders/batch-plan.js';
import { segmentKey } from '../../src/inventory/segment-locks.js';
import type { SkuEntry } from '../../src/inventory/sku-directory.js';

let nextId = 1;
const sku = (segmentCount: number, name = `sku-${nextId}`): SkuEntry => ({
  id: nextId++,
  sku: name,
  segmentCount,
  layoutVersion: 1,
  maxPerCustomer: null,
  saleStartsAt: null,
  saleEndsAt: null,
  emptySegments: new Set(),
  loadedAvailable: [],
  loadedFences: [],
  stale: false,
});
const line = (entry: SkuEntry, quantity: number): BatchLine => ({ entry, quantity, wantsEvery: false });
const order = (...lines: BatchLine[]): PlannableOrder => ({ lines, exclusiveBy: [] });
const key = (entry: SkuEntry, segment: number) => segmentKey({ sku: entry.sku, layoutVersion: 1, segment });

/** A view where every segment is free and this instance knows the stock given (by key), nothing of the rest. */
const view = (known: Record<string, number> = {}, busy: string[] = []): PlanningView => ({
  isFree: (segment) => !busy.includes(segment),
  estimate: (segment) => known[segment],
});

describe('planning a batch', () => {
  it("puts a hot SKU's orders on one segment while its known stock has room, then on another", () => {
    const hot = sku(20);
    const known = Object.fromEntries(Array.from({ length: 20 }, (_, s) => [key(hot, s), 5]));
    const plan = planBatch(
      Array.from({ length: 8 }, () => order(line(hot, 1))),
      64,
      view(known),
    );
    expect(plan.orders).toHaveLength(8);
    // Five orders of one unit fit the first segment chosen; the other three share a second one.
    expect(plan.segments.size).toBe(2);
    const perSegment = new Map<string, number>();
    for (const { candidates } of plan.orders)
      perSegment.set(candidates[0]![0]!, (perSegment.get(candidates[0]![0]!) ?? 0) + 1);
    expect([...perSegment.values()].sort()).toEqual([3, 5]);
  });

  it('gives orders for different SKUs one segment each, all in one batch', () => {
    const skus = Array.from({ length: 10 }, () => sku(4));
    const plan = planBatch(
      skus.map((entry) => order(line(entry, 1))),
      64,
      view(),
    );
    expect(plan.orders).toHaveLength(10);
    expect(plan.segments.size).toBe(10);
    expect(new Set([...plan.segments.values()].map((s) => s.entry.sku)).size).toBe(10);
  });

  it('leaves busy segments out, and an order whose every segment is busy waits for the next batch', () => {
    const entry = sku(2);
    const plan = planBatch([order(line(entry, 1))], 64, view({}, [key(entry, 0), key(entry, 1)]));
    expect(plan.orders).toHaveLength(0);
    expect(plan.segments.size).toBe(0);
    const half = planBatch([order(line(entry, 1))], 64, view({}, [key(entry, 0)]));
    expect(half.orders[0]!.candidates).toEqual([[key(entry, 1)]]);
  });

  it('asks about a SKU whose segments are all held once per plan, however many orders wait for it', () => {
    const hot = sku(20);
    const other = sku(4);
    const held = Array.from({ length: 20 }, (_, s) => key(hot, s));
    let asked = 0;
    const counting: PlanningView = {
      isFree: (segment) => (asked++, !held.includes(segment)),
      estimate: () => undefined,
    };
    const waiting = Array.from({ length: 200 }, () => order(line(hot, 1)));
    const plan = planBatch([...waiting, order(line(other, 1))], 64, counting);
    // Only the order for the other SKU is planned; the hot SKU's segments were asked about by its first order alone.
    expect(plan.orders.map(({ order }) => order.lines[0]!.entry)).toEqual([other]);
    expect(asked).toBeLessThanOrEqual(2 * 20 + 4);
  });

  it('covers a line no single segment is known to hold from every free segment of its SKU', () => {
    const entry = sku(3);
    const known = { [key(entry, 0)]: 2, [key(entry, 1)]: 2, [key(entry, 2)]: 2 };
    const plan = planBatch([order(line(entry, 5))], 64, view(known));
    expect(plan.orders[0]!.candidates[0]!.sort()).toEqual([0, 1, 2].map((s) => key(entry, s)).sort());
  });

  it('never puts two orders that share an exclusive value (a key, a limited customer) in one batch', () => {
    const entry = sku(4);
    const keyed = (k: string): PlannableOrder => ({ lines: [line(entry, 1)], exclusiveBy: [k] });
    const plan = planBatch([keyed('key:a'), keyed('key:a'), keyed('key:b')], 64, view());
    expect(plan.orders.map(({ order }) => order.exclusiveBy[0])).toEqual(['key:a', 'key:b']);
  });

  it('takes at most `max` orders', () => {
    const entry = sku(4);
    expect(
      planBatch(
        Array.from({ length: 10 }, () => order(line(entry, 1))),
        3,
        view(),
      ).orders,
    ).toHaveLength(3);
  });
});

describe('deciding a batch', () => {
  it('decides in arrival order: what an order takes is gone for the orders after it', () => {
    const entry = sku(1);
    const plan = planBatch([order(line(entry, 2)), order(line(entry, 2)), order(line(entry, 1))], 64, view());
    const decisions = decideBatch(plan, new Map([[key(entry, 0), 3]]));
    expect(decisions.map((d) => d.kind)).toEqual(['take', 'out_of_stock', 'take']);
    expect(decisions[1]).toMatchObject({
      kind: 'out_of_stock',
      problem: { code: 'out_of_stock', extensions: { sku: entry.sku, available: 1 } },
    });
  });

  it('refuses as short only when the batch holds every open segment of the SKU', () => {
    const entry = sku(2);
    const plan = planBatch([order(line(entry, 5))], 64, view());
    // Only segment 0 held (segment 1 was busy): not a definitive answer.
    expect(decideBatch(plan, new Map([[key(entry, 0), 1]]))[0]!.kind).toBe('retry');
    // Both held and short together: definitive.
    expect(
      decideBatch(
        { ...plan, orders: [{ ...plan.orders[0]!, candidates: [[key(entry, 0), key(entry, 1)]] }] },
        new Map([
          [key(entry, 0), 1],
          [key(entry, 1), 2],
        ]),
      )[0],
    ).toMatchObject({ kind: 'out_of_stock', problem: { extensions: { available: 3 } } });
  });

  it('splits a line across the held segments of its SKU when none suffices alone', () => {
    const entry = sku(2);
    const plan = planBatch([order(line(entry, 3))], 64, view({ [key(entry, 0)]: 2, [key(entry, 1)]: 2 }));
    const held = new Map([
      [key(entry, 0), 2],
      [key(entry, 1), 2],
    ]);
    const [decision] = decideBatch(plan, held);
    expect(decision).toEqual({
      kind: 'take',
      takes: [
        { key: key(entry, 0), quantity: 2 },
        { key: key(entry, 1), quantity: 1 },
      ],
    });
    expect([...held.values()]).toEqual([0, 1]);
  });

  it('takes a cart whole or not at all', () => {
    const a = sku(1);
    const b = sku(1);
    const plan = planBatch([order(line(a, 1), line(b, 5)), order(line(a, 1))], 64, view());
    const held = new Map([
      [key(a, 0), 1],
      [key(b, 0), 2],
    ]);
    const decisions = decideBatch(plan, held);
    // The cart is short on b, so it takes nothing of a either: the next order gets a's last unit.
    expect(decisions.map((d) => d.kind)).toEqual(['out_of_stock', 'take']);
    expect(decisions[0]).toMatchObject({ problem: { extensions: { sku: b.sku } } });
  });

  it('asks a cover that fell short while other segments were busy to want every segment next time', () => {
    const entry = sku(3);
    const plan = planBatch(
      [order(line(entry, 4))],
      64,
      view({ [key(entry, 0)]: 2, [key(entry, 1)]: 1 }, [key(entry, 2)]),
    );
    const [decision] = decideBatch(
      plan,
      new Map([
        [key(entry, 0), 2],
        [key(entry, 1), 1],
      ]),
    );
    expect(decision).toMatchObject({ kind: 'retry', widen: [plan.orders[0]!.order.lines[0]] });
  });

  it('widens a cover even when only one of its segments was free, so a busy neighbour cannot starve it', () => {
    const entry = sku(3);
    const known = { [key(entry, 0)]: 1, [key(entry, 1)]: 1, [key(entry, 2)]: 1 };
    const plan = planBatch([order(line(entry, 3))], 64, view(known, [key(entry, 0), key(entry, 1)]));
    expect(plan.orders[0]).toMatchObject({ candidates: [[key(entry, 2)]], covers: [true] });
    const [decision] = decideBatch(plan, new Map([[key(entry, 2), 1]]));
    expect(decision).toMatchObject({ kind: 'retry', widen: [plan.orders[0]!.order.lines[0]] });
  });

  it('does not widen a line planned onto one segment that was a guess', () => {
    const entry = sku(3);
    const plan = planBatch([order(line(entry, 3))], 64, view({}, [key(entry, 0), key(entry, 1)]));
    expect(plan.orders[0]!.covers).toEqual([false]);
    expect(decideBatch(plan, new Map([[key(entry, 2), 1]]))[0]).toEqual({ kind: 'retry', widen: [] });
  });
});
