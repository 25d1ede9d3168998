import { z } from 'zod';
import { type ErrorCode, errorCatalog } from '../errors.js';
import { EVENT_TYPES } from '../events/event-types.js';
import { MOVEMENT_KINDS } from '../stock/movement.js';
import { createWebhookBody, eventCursor, replayWebhookBody, updateWebhookBody } from './event-schemas.js';
import { problemType } from './problem.js';
import {
  adjustmentBody,
  cartOrderBody,
  countBody,
  createSkuBody,
  orderId,
  resegmentBody,
  restockBody,
  singleOrderBody,
  skuName,
  updateSkuBody,
} from './schemas.js';

/**
 * The named schemas of the OpenAPI document (src/http/openapi.ts): the request bodies the routes validate with
 * (src/http/schemas.ts, src/http/event-schemas.ts) and the shapes of the answers, below.
 */

const segmentStock = z.object({ segment: z.number().int().min(0), available: z.number().int().min(0) });

const skuView = z.object({
  sku: skuName,
  segments: z.number().int().min(1),
  stock: z.number().int().min(0).describe('Everything ever added.'),
  available: z.number().int().min(0).describe('What is left: the sum of the segments.'),
  reserved: z.number().int().min(0).describe('Units in live reservations.'),
  sold: z.number().int().min(0).describe('Units of confirmed orders.'),
  maxPerCustomer: z.number().int().min(1).nullable().describe("Most units one customer's live orders may hold."),
  lowStockThreshold: z.number().int().min(0).nullable().describe('Available at or below this is `sku.low_stock`.'),
  saleStartsAt: z.iso.datetime().nullable().describe('When orders open (inclusive); null: since the SKU exists.'),
  saleEndsAt: z.iso.datetime().nullable().describe('When orders close (exclusive); null: never.'),
  onSale: z.boolean().describe("Whether orders are taken now, by the service's shared clock."),
  segmentStock: z.array(segmentStock),
});

const movement = z.object({
  id: z.string(),
  kind: z.enum(MOVEMENT_KINDS),
  quantity: z.number().int().describe('Units added to what is available; negative: taken or removed.'),
  reason: z
    .string()
    .nullable()
    .describe(
      "An adjustment's or a count's reason; a create's or a restock's kind; a cancel's `cancelled`, or `refund` " +
        "when the order had been confirmed; an expiry's `expired`; null for an order.",
    ),
  actor: z.string().nullable().describe('The credential: `key:<name>`, `customer:<id>` or `anonymous`.'),
  note: z.string().nullable(),
  reference: z.string().nullable(),
  orderId: z.string().nullable(),
  availableAfter: z
    .number()
    .int()
    .min(0)
    .nullable()
    .describe("The SKU's available right after it, where the ledger knows it (creates, adjustments, counts)."),
  at: z.iso.datetime(),
});

/** A page of a SKU's history, newest first. */
const movementPage = z.object({
  sku: skuName,
  movements: z.array(movement),
  nextCursor: z
    .string()
    .nullable()
    .describe('Pass as `cursor` for the next (older) page; null once the history is done.'),
});

/** The SKU after an adjustment or a counted set, with the movement it recorded. */
const skuChange = skuView.extend({ movement });

const deductions = z.array(z.object({ segment: z.number().int().min(0), quantity: z.number().int().min(1) }));

const orderView = z.object({
  orderId: orderId,
  status: z.enum(['reserved', 'confirmed', 'cancelled', 'expired']),
  sku: skuName.optional().describe('Single-SKU orders only, as are quantity and deductions.'),
  quantity: z.number().int().min(1).optional(),
  deductions: deductions.optional(),
  items: z.array(z.object({ sku: skuName, quantity: z.number().int().min(1), deductions })),
  customerId: z.string().optional(),
  expiresAt: z.iso.datetime().optional().describe('When a reservation lapses.'),
  createdAt: z.iso.datetime(),
});

const skuPage = z.object({
  skus: z.array(skuView.omit({ segmentStock: true })),
  nextCursor: z.string().nullable().describe('Pass as `cursor` for the next page; null once the list is done.'),
});

const orderPage = z.object({ orders: z.array(orderView), nextCursor: z.string().nullable() });

const problem = z.object({
  type: z.string().describe(`\`${problemType('<code>' as ErrorCode)}\``),
  title: z.string(),
  status: z.number().int(),
  detail: z.string(),
  code: z.enum(Object.keys(errorCatalog) as [ErrorCode, ...ErrorCode[]]),
  available: z.number().int().min(0).optional().describe('out_of_stock only: the units seen under the locks.'),
  sku: z
    .string()
    .optional()
    .describe('out_of_stock, purchase_limit and not_on_sale: the SKU that fell short, is limited or is not on sale.'),
  opensAt: z.iso
    .datetime()
    .optional()
    .describe('not_on_sale before the opening: when orders open (`Retry-After` says in how many seconds).'),
  closedAt: z.iso.datetime().optional().describe('not_on_sale after the close: when orders closed.'),
  remaining: z
    .number()
    .int()
    .min(0)
    .optional()
    .describe('purchase_limit only: the units the customer may still order.'),
  orderStatus: z
    .enum(['confirmed', 'cancelled', 'expired'])
    .optional()
    .describe('order_not_reserved only: what the order is instead.'),
  scope: z.string().optional().describe('forbidden: the scope (or scopes, space-separated) the caller lacks.'),
});

const stockEvent = z.object({
  id: z.string().describe('Global, increasing; also the cursor to read on after this event.'),
  type: z.enum(EVENT_TYPES),
  sku: skuName,
  sequence: z.number().int().min(1).describe("The SKU's events counted from 1, without gaps."),
  occurredAt: z.iso.datetime(),
  data: z
    .looseObject({ available: z.number().int(), reserved: z.number().int(), sold: z.number().int() })
    .describe(
      "The change (`order`, `sku`, `restock`, a line's `draw`, `admission` or `line`, …) and the SKU's totals after it.",
    ),
});

const perSecond = z.array(z.number());
const sampled = z.array(z.number().nullable());
const seriesColumns = z.object({
  placed: perSecond.describe('Orders placed each second.'),
  refusals: z
    .object({ out_of_stock: perSecond, not_on_sale: perSecond, purchase_limit: perSecond, lock_busy: perSecond })
    .describe('Orders refused each second, by reason.'),
  p50Ms: sampled.describe('Median answer time of the orders answered that second, ms (null: none).'),
  p99Ms: sampled.describe('99th percentile answer time, ms, from fixed buckets summed across instances.'),
  lockWaits: perSecond.describe('Orders that parked waiting for a segment lock.'),
  events: perSecond.describe('Events sequenced into the feed (fleet only).'),
  webhookLagSeconds: sampled.describe('Longest webhook delivery lag reported that second (fleet only).'),
  available: sampled.describe("The SKU's available, where sampled (the fleet's: null)."),
  reserved: sampled,
  sold: sampled,
});

const seriesWindow = z.object({
  from: z.number().int().describe('The first second, epoch seconds by the shared clock.'),
  seconds: z.number().int().describe('How many seconds every column holds.'),
  fleet: seriesColumns.describe('All SKUs, all instances.'),
  sku: seriesColumns.describe('The SKU, all instances.'),
});

const instanceBeat = z.object({
  instance: z.string(),
  ready: z.boolean().describe('Whether it answered /readyz with 200 at its last heartbeat.'),
  seenAt: z.number().describe('Its last heartbeat, epoch ms by the shared clock.'),
  alive: z.boolean().describe('False once its heartbeat expired (stopped, or cut off from Redis).'),
});

const dashboardSnapshot = z.object({
  instance: z.string().describe('The instance that served this snapshot.'),
  at: z.iso.datetime(),
  sku: skuName,
  view: skuView.nullable(),
  problem: z.string().optional(),
  recent: seriesWindow.nullable().describe('The last 10 whole seconds, re-sent each second as late counts arrive.'),
  instances: z.array(instanceBeat).describe('The instances that beat within the last minute.'),
  timeline: z.array(stockEvent).describe("The SKU's sku.* events of the last hour, newest first."),
  books: z
    .object({
      balanced: z.boolean().nullable().describe('As GET /audit says it.'),
      unbalancedCount: z.number().int().min(0),
      unbalanced: z.array(skuName).describe('The first five SKUs off; GET /audit lists them all with what is off.'),
      checkedSecondsAgo: z
        .number()
        .int()
        .min(0)
        .nullable()
        .describe('Since the last audit pass ended; null before the first.'),
    })
    .nullable()
    .describe("The books' audit, fleet-wide; null when it cannot be read."),
});

const dashboardHistory = z.object({
  sku: skuName,
  series: seriesWindow.describe('The last hour, up to the last whole second.'),
  timeline: z.array(stockEvent).describe("The SKU's sku.* events of the last hour, newest first."),
});

const eventPage = z.object({
  events: z.array(stockEvent),
  nextCursor: z.string().nullable().describe('Pass as `after` for more; null when nothing is left for now.'),
});

const webhookView = z.object({
  id: z.uuid(),
  url: z.string(),
  types: z.array(z.enum(EVENT_TYPES)),
  skus: z.array(skuName).nullable(),
  enabled: z.boolean(),
  deliveredThrough: eventCursor.describe('Every matching event up to this cursor was delivered or given up on.'),
  attempts: z.number().int().min(0),
  failingSince: z.iso.datetime().nullable(),
  nextAttemptAt: z.iso.datetime(),
  createdAt: z.iso.datetime(),
});

const deliveryView = z.object({
  eventId: eventCursor,
  attempt: z.number().int().min(1),
  outcome: z.enum(['delivered', 'retrying', 'failed']),
  responseStatus: z.number().int().nullable().describe("The receiver's HTTP status, when one came back."),
  error: z
    .enum(['unreachable', 'timeout', 'tls'])
    .nullable()
    .describe(
      'Without a status, why: `unreachable` (refused destination, closed port, reset, no address), `timeout`, `tls`.',
    ),
  attemptedAt: z.iso.datetime(),
});

const count = z.number().int();
const auditReport = z.object({
  at: z.iso.datetime().describe("The database's clock now: compare the other times with it."),
  balanced: z
    .boolean()
    .nullable()
    .describe('true: no SKU off and a full pass done; false: some SKU off; null: nothing found, no full pass yet.'),
  unbalancedCount: count.min(0),
  unbalanced: z
    .array(
      z.object({
        sku: skuName,
        problems: z.array(
          z.object({
            check: z.enum([
              'stock_equals_additions',
              'units_add_up',
              'sold_matches_ledger',
              'reserved_matches_ledger',
              'returns_match_ended_orders',
              'no_excess_returns',
              'no_negative_segment',
              'orders_match_ledger',
            ]),
            detail: z.string().describe('The figures that disagree.'),
          }),
        ),
        books: z.record(z.string(), count).describe("The figures of the SKU's last check (src/audit/books.ts)."),
        foundAt: z.iso.datetime(),
        checkedAt: z.iso.datetime(),
      }),
    )
    .describe('The first 100 SKUs found off, oldest finding first.'),
  lastPassAt: z.iso.datetime().nullable(),
  lastFullPass: z
    .object({ startedAt: z.iso.datetime(), finishedAt: z.iso.datetime() })
    .nullable()
    .describe("The last sweep over every SKU: each SKU's books were read between these times."),
});

/** Every named schema of the document, by its id under `#/components/schemas`. */
export const components = z.registry<{ id: string }>();
components.add(stockEvent, { id: 'Event' });
components.add(eventPage, { id: 'EventPage' });
components.add(createWebhookBody, { id: 'CreateWebhook' });
components.add(updateWebhookBody, { id: 'UpdateWebhook' });
components.add(replayWebhookBody, { id: 'ReplayWebhook' });
components.add(webhookView, { id: 'Webhook' });
components.add(webhookView.extend({ secret: z.string().describe('`whsec_…`, shown this once.') }), {
  id: 'CreatedWebhook',
});
components.add(z.object({ webhooks: z.array(webhookView) }), { id: 'WebhookList' });
components.add(z.object({ deliveries: z.array(deliveryView) }), { id: 'DeliveryList' });
components.add(createSkuBody, { id: 'CreateSku' });
components.add(resegmentBody, { id: 'Resegment' });
components.add(restockBody, { id: 'Restock' });
components.add(adjustmentBody, { id: 'Adjustment' });
components.add(countBody, { id: 'CountedStock' });
components.add(movement, { id: 'Movement' });
components.add(skuChange, { id: 'SkuChange' });
components.add(movementPage, { id: 'MovementPage' });
// Generated with the default MAX_ORDER_QUANTITY; a service configured otherwise accepts up to its own limit.
components.add(z.union([singleOrderBody(1000), cartOrderBody(1000)]), { id: 'PlaceOrder' });
components.add(updateSkuBody, { id: 'UpdateSku' });
components.add(orderPage, { id: 'OrderPage' });
components.add(skuView, { id: 'SkuView' });
components.add(skuPage, { id: 'SkuPage' });
components.add(orderView, { id: 'Order' });
components.add(problem, { id: 'Problem' });
components.add(dashboardSnapshot, { id: 'DashboardSnapshot' });
components.add(dashboardHistory, { id: 'DashboardHistory' });
components.add(auditReport, { id: 'AuditReport' });
