import { describe, expect, it } from 'vitest';
import {
  type BatchLine,
  decideBatch,
  type PlannableOrder,
  planBatch,
  type PlanningView,
} from '../../src/orders/batch-plan.js';
import { segmentKey } from '../../src/inventory/segment-locks.js';
import { openSegments, type SkuEntry } from '../../src/inventory/sku-directory.js';

let nextId = 1;
const sku = (segmentCount: number, name = `sku-${nextId}`): SkuEntry => ({
  id: nextId++,
  sku: name,
  segmentCount,
  layoutVersion: 1,
  maxPerCustomer: null,
  lined: false,
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

describe('planning a batch: the edges', () => {
  const keysOfSku = (plan: ReturnType<typeof planBatch>, entry: SkuEntry) =>
    plan.bySku.get(entry)!.map((planned) => planned.key);

  it('shares a segment with room (one segment, not a cover), and tries a segment known to hold exactly enough', () => {
    const entry = sku(2);
    const exact = { [key(entry, 0)]: 3, [key(entry, 1)]: 3 };
    const plan = planBatch([order(line(entry, 3))], 64, view(exact));
    expect(plan.orders[0]).toMatchObject({ covers: [false] });
    expect(plan.orders[0]!.candidates[0]).toHaveLength(1);
    const shared = planBatch([order(line(entry, 1)), order(line(entry, 1))], 64, view(exact));
    expect(shared.orders.map((o) => o.covers)).toEqual([[false], [false]]);
    expect(shared.segments.size).toBe(1);
  });

  it('starts each plan at a random segment, so single orders spread over the segments', () => {
    const entry = sku(20);
    const first = new Set(
      Array.from({ length: 50 }, () => planBatch([order(line(entry, 1))], 64, view()).orders[0]!.candidates[0]![0]),
    );
    expect(first.size).toBeGreaterThan(1);
  });

  it('lists each planned segment once per SKU, when a later order covers from segments already planned', () => {
    const entry = sku(3);
    const known = { [key(entry, 0)]: 2, [key(entry, 1)]: 2, [key(entry, 2)]: 2 };
    const plan = planBatch([order(line(entry, 1)), order(line(entry, 5))], 64, view(known));
    expect(plan.orders).toHaveLength(2);
    expect(plan.orders[1]!.covers).toEqual([true]);
    expect(keysOfSku(plan, entry).sort()).toEqual([0, 1, 2].map((s) => key(entry, s)).sort());
    expect([...plan.segments.values()].every((planned) => plan.bySku.get(entry)!.includes(planned))).toBe(true);
  });

  it('plans a second cover of the same SKU onto the segments the first one planned', () => {
    const entry = sku(2);
    const known = { [key(entry, 0)]: 1, [key(entry, 1)]: 1 };
    const plan = planBatch([order(line(entry, 2)), order(line(entry, 2))], 64, view(known));
    expect(plan.orders.map((o) => o.covers)).toEqual([[true], [true]]);
    expect(plan.segments.size).toBe(2);
  });

  it('gives a line that wants every segment all of them, or nothing while one is busy', () => {
    const entry = sku(3);
    const every: BatchLine = { entry, quantity: 1, wantsEvery: true };
    const known = { [key(entry, 0)]: 9, [key(entry, 1)]: 9, [key(entry, 2)]: 9 };
    const plan = planBatch([order(every)], 64, view(known));
    expect(plan.orders[0]).toMatchObject({ covers: [true] });
    expect(plan.orders[0]!.candidates[0]!.sort()).toEqual([0, 1, 2].map((s) => key(entry, s)).sort());
    expect(planBatch([order(every)], 64, view(known, [key(entry, 1)])).orders).toEqual([]);
  });

  it('leaves a SKU alone while orders of this instance wait for all its segments', () => {
    const waited = sku(2);
    const other = sku(2);
    const plan = planBatch([order(line(waited, 1)), order(line(other, 1))], 64, {
      ...view(),
      isWaitedFor: (entry) => entry === waited,
    });
    expect(plan.orders.map(({ order }) => order.lines[0]!.entry)).toEqual([other]);
    expect(plan.bySku.has(waited)).toBe(false);
  });

  it('plans a cart whole or not at all: a line that cannot be planned takes its segments back out of the plan', () => {
    const a = sku(2);
    const b = sku(1);
    const plan = planBatch([order(line(a, 1), line(b, 1))], 64, view({}, [key(b, 0)]));
    expect(plan.orders).toEqual([]);
    expect(plan.segments.size).toBe(0);
    expect(plan.bySku.get(a)).toEqual([]);
  });
});

describe('deciding a batch: the edges', () => {
  it("prefers the order's own candidate that holds enough, then another held segment of its SKU", () => {
    const entry = sku(2);
    const plan = planBatch([order(line(entry, 3))], 64, view({}, [key(entry, 0)]));
    expect(plan.orders[0]!.candidates).toEqual([[key(entry, 1)]]);
    // Its candidate (segment 1) holds exactly enough: taken, although segment 0 (held for another order) has more.
    const exactly = new Map([
      [key(entry, 0), 5],
      [key(entry, 1), 3],
    ]);
    expect(decideBatch(plan, exactly)[0]).toEqual({ kind: 'take', takes: [{ key: key(entry, 1), quantity: 3 }] });
    // Its candidate falls short: the other held segment that holds enough alone, rather than a split.
    const short = new Map([
      [key(entry, 0), 5],
      [key(entry, 1), 2],
    ]);
    expect(decideBatch(plan, short)[0]).toEqual({ kind: 'take', takes: [{ key: key(entry, 0), quantity: 3 }] });
  });

  it('splits only across the segments the batch holds', () => {
    const entry = sku(3);
    const plan = planBatch([order(line(entry, 3))], 64, view({}, [key(entry, 1)]));
    const held = new Map([
      [key(entry, 0), 2],
      [key(entry, 2), 2],
    ]);
    expect(decideBatch(plan, held)[0]).toEqual({
      kind: 'take',
      takes: [
        { key: key(entry, 0), quantity: 2 },
        { key: key(entry, 2), quantity: 1 },
      ],
    });
  });

  it('refuses as short when what the unheld segments can at most hold cannot make up the rest', () => {
    const entry = sku(2);
    const plan = planBatch([order(line(entry, 3))], 64, view({}, [key(entry, 1)]));
    const held = new Map([[key(entry, 0), 1]]);
    const atMost = (bound: number) => (k: string) => (k === key(entry, 1) ? bound : undefined);
    expect(decideBatch(plan, new Map(held), atMost(1))[0]).toMatchObject({
      kind: 'out_of_stock',
      problem: { extensions: { available: 2 }, detail: expect.stringContaining('3 ordered') },
    });
    // Exactly enough might be there: not definitive.
    expect(decideBatch(plan, new Map(held), atMost(2))[0]!.kind).toBe('retry');
    // Nothing provable of the unheld segment: not definitive either.
    expect(decideBatch(plan, new Map(held))[0]!.kind).toBe('retry');
  });

  it('does not widen a cover some of whose segments the batch could not take', () => {
    const entry = sku(3);
    const known = { [key(entry, 0)]: 1, [key(entry, 1)]: 1, [key(entry, 2)]: 1 };
    const plan = planBatch([order(line(entry, 3))], 64, view(known));
    expect(plan.orders[0]!.covers).toEqual([true]);
    // Segments 1 and 2 were taken by another process between the plan and the locks.
    expect(decideBatch(plan, new Map([[key(entry, 0), 1]]))[0]).toEqual({ kind: 'retry', widen: [] });
  });
});

describe('open segments', () => {
  it('are those not known to be empty, and follow segments marked empty later', () => {
    const entry = sku(4);
    expect(openSegments(entry)).toEqual([0, 1, 2, 3]);
    entry.emptySegments.add(1);
    expect(openSegments(entry)).toEqual([0, 2, 3]);
    expect(openSegments(entry)).toEqual([0, 2, 3]);
    entry.emptySegments.add(3);
    expect(openSegments(entry)).toEqual([0, 2]);
  });
});
