import { z } from 'zod';
import { SKU_NAME_MAX_LENGTH, SKU_NAME_PATTERN } from '../stock/sku-name.js';

/** Request shapes. Objects are strict: an unknown field is an error, not something silently ignored. */

/**
 * A whole number from `min` to `max`. The bounds are checked before wholeness, so that a refusal of a huge number
 * names the bound of this field (`quantity: 1e308` is "≤ 1000"), not the range of safe integers.
 */
export const wholeNumber = (min: number, max: number) => z.number().min(min).max(max).int();

/** The same, from a query parameter's text. */
export const wholeNumberParameter = (min: number, max: number) => z.coerce.number().min(min).max(max).int();

/** `.` and `..` are not names: every URL parser resolves `/skus/..` to `/`, so no ordinary client could address it. */
export const skuName = z
  .string()
  .min(1)
  .max(SKU_NAME_MAX_LENGTH)
  .regex(SKU_NAME_PATTERN, 'only letters, digits and . _ : - are allowed')
  .refine((name) => name !== '.' && name !== '..', "'.' and '..' are not SKU names: no URL can address them");

const stockQuantity = wholeNumber(0, 1e12);

const maxPerCustomer = wholeNumber(1, 1_000_000);

/** Available at or below this is announced as `sku.low_stock`. */
const lowStockThreshold = wholeNumber(0, 1e12);

/** Sale windows lie in years 2000–9999 (UTC): older or later instants are typing errors, not sales. */
export const SALE_INSTANT_RANGE = { from: Date.UTC(2000, 0, 1), until: Date.UTC(10_000, 0, 1) };

/** An instant of a sale window: RFC 3339 with a zone (`Z` or an offset); `null` leaves that side open. */
const saleInstant = z.iso
  .datetime({ offset: true })
  .refine((text) => {
    const at = Date.parse(text);
    return at >= SALE_INSTANT_RANGE.from && at < SALE_INSTANT_RANGE.until;
  }, 'must lie in the years 2000–9999 (UTC)')
  .nullable();

/**
 * A window whose both ends are given must end after it starts; a PATCH that gives one end is checked against the
 * SKU's other when it is applied.
 */
const windowInOrder = (body: { saleStartsAt?: string | null; saleEndsAt?: string | null }) =>
  !body.saleStartsAt || !body.saleEndsAt || Date.parse(body.saleEndsAt) > Date.parse(body.saleStartsAt);
const windowInOrderIssue = { message: 'saleEndsAt must be after saleStartsAt', path: ['saleEndsAt'] };

export const createSkuBody = z
  .strictObject({
    sku: skuName,
    stock: stockQuantity,
    segments: wholeNumber(1, 1024),
    maxPerCustomer: maxPerCustomer.optional(),
    lowStockThreshold: lowStockThreshold.optional(),
    saleStartsAt: saleInstant.optional(),
    saleEndsAt: saleInstant.optional(),
  })
  .refine(windowInOrder, windowInOrderIssue);

/** Any of the fields: `null` removes the limit or the threshold, or opens the window on that side. */
export const updateSkuBody = z
  .strictObject({
    maxPerCustomer: maxPerCustomer.nullable().optional(),
    lowStockThreshold: lowStockThreshold.nullable().optional(),
    saleStartsAt: saleInstant.optional(),
    saleEndsAt: saleInstant.optional(),
  })
  .refine((body) => Object.keys(body).length > 0, 'give maxPerCustomer, lowStockThreshold, saleStartsAt or saleEndsAt')
  .refine(windowInOrder, windowInOrderIssue);

export const resegmentBody = z.strictObject({
  segments: wholeNumber(1, 1024),
});

export const restockBody = z.strictObject({
  quantity: wholeNumber(1, 1e12),
});

/**
 * Why units were added or removed by an adjustment or a counted set. `other` needs a `note` saying why.
 */
const STOCK_CHANGE_REASONS = [
  'correction',
  'cycle_count',
  'damaged',
  'shrinkage',
  'received',
  'returned',
  'quality_control',
  'promotion',
  'other',
] as const;

const stockChangeDetails = {
  reason: z.enum(STOCK_CHANGE_REASONS),
  note: z.string().min(1).max(500).optional().describe('Free text; required with reason `other`.'),
  reference: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe('The document behind the change (a delivery note, a count sheet, …).'),
};
const noteWhenOther = (body: { reason: string; note?: string | undefined }) =>
  body.reason !== 'other' || body.note !== undefined;
const noteWhenOtherIssue = { message: 'reason other needs a note', path: ['note'] };

/** `delta` units added (> 0) or removed (< 0). */
export const adjustmentBody = z
  .strictObject({
    delta: wholeNumber(-1e12, 1e12).refine((delta) => delta !== 0, 'must not be 0'),
    ...stockChangeDetails,
  })
  .refine(noteWhenOther, noteWhenOtherIssue);

/**
 * A counted quantity: `available` becomes what is available, if that is still `compareAvailable`. Without a compare
 * the caller must say `ignoreCompare: true`, as it may overwrite orders placed since the count.
 */
export const countBody = z
  .strictObject({
    available: stockQuantity,
    compareAvailable: stockQuantity.optional(),
    ignoreCompare: z.literal(true).optional(),
    ...stockChangeDetails,
  })
  .refine(noteWhenOther, noteWhenOtherIssue)
  .refine((body) => (body.compareAvailable !== undefined) !== (body.ignoreCompare === true), {
    message: 'give compareAvailable, or ignoreCompare: true to set without one (not both)',
    path: ['compareAvailable'],
  });

export const customerId = z
  .string()
  .regex(/^[A-Za-z0-9._:@-]{1,128}$/, 'must be 1–128 characters of letters, digits and . _ : @ -');

const orderOptions = {
  customerId: customerId.optional(),
  /** Reserve the units for this long; without it the order is confirmed at once. */
  holdSeconds: wholeNumber(1, 86_400).optional(),
};

/** `{sku, quantity}`: a line of an order. */
export const orderLine = (maxQuantity: number) =>
  z.strictObject({
    sku: skuName,
    quantity: wholeNumber(1, maxQuantity),
  });

/** One SKU: `{sku, quantity}`. */
export const singleOrderBody = (maxQuantity: number) => orderLine(maxQuantity).extend(orderOptions);

/** A cart: 1–50 lines of distinct SKUs, placed all or nothing. */
export const cartOrderBody = (maxQuantity: number) =>
  z.strictObject({
    items: z
      .array(orderLine(maxQuantity))
      .min(1)
      .max(50)
      .refine((items) => new Set(items.map((item) => item.sku)).size === items.length, 'SKUs must be distinct'),
    ...orderOptions,
  });

export const customerOrdersQuery = z.strictObject({
  /** Required, except with a customer token, whose own orders are listed. */
  customerId: customerId.optional(),
  limit: wholeNumberParameter(1, 100).default(20),
  cursor: z
    .string()
    .max(200)
    .regex(/^[A-Za-z0-9_-]+$/, 'must be a nextCursor value')
    .optional(),
});

/** `true` or `false`, as a query parameter. */
const queryFlag = z.enum(['true', 'false']);

export const skuListQuery = z.strictObject({
  limit: wholeNumberParameter(1, 100).default(20),
  cursor: z
    .string()
    .max(200)
    .regex(/^[A-Za-z0-9_-]+$/, 'must be a nextCursor value')
    .optional()
    .describe('A `nextCursor` of the page before, asked with the same filters.'),
  prefix: z
    .string()
    .max(64)
    .regex(/^[A-Za-z0-9._:-]+$/, 'only letters, digits and . _ : - are allowed')
    .optional()
    .describe('Only SKUs whose name starts with this.'),
  onSale: queryFlag.optional().describe('`true`: only SKUs on sale now; `false`: only those outside their window.'),
  soldOut: queryFlag.optional().describe('`true`: only SKUs with nothing available; `false`: only the others.'),
  lowStock: queryFlag
    .optional()
    .describe('`true`: only SKUs with 0 < available ≤ `lowStockThreshold`; `false`: only the others.'),
});

/** 1–128 visible ASCII characters. */
export const idempotencyKey = z.string().regex(/^[\x21-\x7e]{1,128}$/, 'must be 1–128 visible ASCII characters');

export const orderId = z.uuid();

/** A waiting line's settings (PUT /skus/:sku/line): the most tickets it holds, and how long an admission is held. */
export const lineSettingsBody = z.strictObject({
  capacity: wholeNumber(1, 10_000_000),
  holdSeconds: wholeNumber(1, 86_400).optional().describe('Default 120.'),
});

/** Joining a line: the customer (a customer token's own when not named) and the units wanted. */
export const joinLineBody = (maxQuantity: number) =>
  z.strictObject({
    customerId: customerId.optional(),
    quantity: wholeNumber(1, maxQuantity).optional().describe('Default 1.'),
  });

export const ticketId = z.uuid();
