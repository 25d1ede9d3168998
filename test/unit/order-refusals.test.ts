import { describe, expect, it } from 'vitest';
import { isOnSale, type SaleWindow } from '../../src/inventory/sale-window.js';
import type { SkuEntry } from '../../src/inventory/sku-directory.js';
import { FENCE_GUARD_SINCE_READ } from '../../src/inventory/fence-guard.js';
import { writeBatchStatement } from '../../src/orders/batch-statements.js';
import { AppError } from '../../src/errors.js';
import type { OrderRecord } from '../../src/orders/order.repository.js';
import {
  lockBusy,
  outcomeOf,
  outOfStock,
  purchaseLimit,
  refusalBeforeLocks,
  refused,
} from '../../src/orders/outcome.js';

/** A SKU as the instance knows it: four segments, none read empty, no limit, the given window. */
function entryOf(sku: string, window: SaleWindow, fields: Partial<SkuEntry> = {}): SkuEntry {
  return {
    id: 1,
    sku,
    segmentCount: 4,
    layoutVersion: 1,
    maxPerCustomer: null,
    lined: false,
    emptySegments: new Set(),
    loadedAvailable: [],
    loadedFences: [],
    stale: false,
    ...window,
    ...fields,
  };
}

const open: SaleWindow = { saleStartsAt: null, saleEndsAt: null };

/** The refusal an order for one unit of `entry` meets before any lock, at `now`, by `customer`. */
function outsideWindow(sku: string, window: SaleWindow, now: number) {
  return refusalBeforeLocks([{ entry: entryOf(sku, window), quantity: 1 }], 'alice', now);
}

/** What a client receives of a refusal: the problem document's members and Retry-After. */
const answered = (error: {
  status: number;
  code: string;
  detail: string;
  extensions: object;
  retryAfterSeconds?: number;
}) => ({
  status: error.status,
  code: error.code,
  detail: error.detail,
  extensions: error.extensions,
  retryAfterSeconds: error.retryAfterSeconds,
});

describe('the refusals under the segment locks', () => {
  it('answers busy 503, retryable after a second, naming the wait', () => {
    expect(answered(lockBusy(2000))).toEqual({
      status: 503,
      code: 'lock_busy',
      detail: 'every segment stayed locked for 2000 ms',
      extensions: {},
      retryAfterSeconds: 1,
    });
  });

  it('answers out of stock 409 with the SKU and the units left', () => {
    expect(answered(outOfStock('tea', 5, 2))).toEqual({
      status: 409,
      code: 'out_of_stock',
      detail: "SKU 'tea' has 2 unit(s) left, 5 ordered",
      extensions: { sku: 'tea', available: 2 },
      retryAfterSeconds: undefined,
    });
  });

  it('says when a sale opens (with Retry-After) or when it closed (without)', () => {
    const opensAt = Date.parse('2030-01-01T00:00:00.000Z');
    expect(answered(outsideWindow('tea', { saleStartsAt: opensAt, saleEndsAt: null }, opensAt - 30_000)!)).toEqual({
      status: 409,
      code: 'not_on_sale',
      detail: "SKU 'tea' goes on sale at 2030-01-01T00:00:00.000Z",
      extensions: { sku: 'tea', opensAt: '2030-01-01T00:00:00.000Z' },
      retryAfterSeconds: 30,
    });
    const closedAt = Date.parse('2020-01-01T00:00:00.000Z');
    expect(answered(outsideWindow('tea', { saleStartsAt: null, saleEndsAt: closedAt }, closedAt)!)).toEqual({
      status: 409,
      code: 'not_on_sale',
      detail: "SKU 'tea' was on sale until 2020-01-01T00:00:00.000Z",
      extensions: { sku: 'tea', closedAt: '2020-01-01T00:00:00.000Z' },
      retryAfterSeconds: undefined,
    });
  });

  it('asks for a customer on a limited SKU, and says how many more units a customer may order', () => {
    const limited = entryOf('tea', open, { maxPerCustomer: 2 });
    expect(refusalBeforeLocks([{ entry: limited, quantity: 1 }], 'alice', 0)).toBeUndefined();
    expect(answered(refusalBeforeLocks([{ entry: limited, quantity: 1 }], null, 0)!)).toEqual({
      status: 400,
      code: 'customer_required',
      detail: "SKU 'tea' limits units per customer: the order needs a customerId",
      extensions: {},
      retryAfterSeconds: undefined,
    });
    expect(answered(purchaseLimit('tea', 3))).toEqual({
      status: 409,
      code: 'purchase_limit',
      detail: "SKU 'tea' limits units per customer: this customer may order 3 more",
      extensions: { sku: 'tea', remaining: 3 },
      retryAfterSeconds: undefined,
    });
  });

  it('refuses a SKU whose every segment was read empty, unless the entry is stale', () => {
    const empty = new Set([0, 1, 2, 3]);
    const soldOut = entryOf('tea', open, { emptySegments: empty });
    expect(answered(refusalBeforeLocks([{ entry: soldOut, quantity: 2 }], null, 0)!)).toMatchObject({
      code: 'out_of_stock',
      extensions: { sku: 'tea', available: 0 },
    });
    expect(refusalBeforeLocks([{ entry: { ...soldOut, stale: true }, quantity: 2 }], null, 0)).toBeUndefined();
    const oneLeft = entryOf('tea', open, { emptySegments: new Set([0, 1, 3]) });
    expect(refusalBeforeLocks([{ entry: oneLeft, quantity: 2 }], null, 0)).toBeUndefined();
  });
});

describe('sale windows (by the shared clock)', () => {
  const opens = Date.parse('2030-01-01T00:00:00.000Z');
  const closes = opens + 3_600_000;
  const window: SaleWindow = { saleStartsAt: opens, saleEndsAt: closes };

  it('is open from its start (inclusive) to its end (exclusive); a missing side is open', () => {
    expect(isOnSale(window, opens - 1)).toBe(false);
    expect(isOnSale(window, opens)).toBe(true);
    expect(isOnSale(window, closes - 1)).toBe(true);
    expect(isOnSale(window, closes)).toBe(false);
    expect(isOnSale({ saleStartsAt: null, saleEndsAt: closes }, 0)).toBe(true);
    expect(isOnSale({ saleStartsAt: null, saleEndsAt: closes }, closes)).toBe(false);
    expect(isOnSale({ saleStartsAt: opens, saleEndsAt: null }, Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(isOnSale({ saleStartsAt: opens, saleEndsAt: null }, opens - 1)).toBe(false);
    expect(isOnSale({ saleStartsAt: null, saleEndsAt: null }, 0)).toBe(true);
  });

  it('refuses before the opening with the whole seconds until then, rounded up', () => {
    const early = outsideWindow('tea', window, opens - 1_500)!;
    expect(answered(early)).toMatchObject({
      code: 'not_on_sale',
      extensions: { sku: 'tea', opensAt: '2030-01-01T00:00:00.000Z' },
      retryAfterSeconds: 2,
    });
    expect(outsideWindow('tea', window, opens - 1)!.retryAfterSeconds).toBe(1);
    expect(outsideWindow('tea', window, opens - 2_000)!.retryAfterSeconds).toBe(2);
  });

  it('lets orders through inside the window, and refuses them from its end on, without Retry-After', () => {
    expect(outsideWindow('tea', window, opens)).toBeUndefined();
    expect(outsideWindow('tea', window, closes - 1)).toBeUndefined();
    const late = outsideWindow('tea', window, closes)!;
    expect(answered(late)).toMatchObject({
      code: 'not_on_sale',
      extensions: { sku: 'tea', closedAt: '2030-01-01T01:00:00.000Z' },
      retryAfterSeconds: undefined,
    });
    expect(outsideWindow('tea', { saleStartsAt: null, saleEndsAt: null }, 0)).toBeUndefined();
    expect(outsideWindow('tea', { saleStartsAt: null, saleEndsAt: closes }, opens)).toBeUndefined();
    expect(outsideWindow('tea', { saleStartsAt: opens, saleEndsAt: null }, closes * 2)).toBeUndefined();
  });
});

describe("the order statement's fence guard", () => {
  it('writes a segment only where the row still carries the token its holder read, and that token is older', () => {
    expect(FENCE_GUARD_SINCE_READ).toBe('s.fence_token = w.fence_seen and s.fence_token < w.fence');
    expect(writeBatchStatement.text).toContain(`where ${FENCE_GUARD_SINCE_READ}\n`);
  });
});

describe("an order's outcome, as the metrics count it", () => {
  const order = { orderId: 'o-1' } as unknown as OrderRecord;

  it('is placed or replayed for an order answered with its order', () => {
    expect(outcomeOf({ placed: { order, replayed: false } })).toBe('placed');
    expect(outcomeOf({ placed: { order, replayed: true } })).toBe('replayed');
  });

  it("is a refusal's code, dependency_unavailable for Redis or Postgres away, and internal for anything else", () => {
    expect(outcomeOf({ error: outOfStock('tea', 2, 1) })).toBe('out_of_stock');
    expect(outcomeOf({ error: new AppError('rate_limited', 'slow down') })).toBe('rate_limited');
    expect(outcomeOf({ error: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }) })).toBe(
      'dependency_unavailable',
    );
    expect(outcomeOf({ error: new Error('a bug') })).toBe('internal');
    expect(outcomeOf({ error: 'not even an error' })).toBe('internal');
  });

  it('ends a refused order under its refusal, with the problem the client receives', () => {
    const problem = lockBusy(500);
    expect(refused(problem)).toEqual({ outcome: 'lock_busy', problem });
  });
});
