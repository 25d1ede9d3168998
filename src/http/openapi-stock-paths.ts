import { MAX_SKUS_SCANNED } from '../stock/sku-listing.js';
import {
  ADMIN,
  ALWAYS,
  AUTH,
  OPEN_UNTIL_KEYS,
  WRITE,
  adminSecurity,
  body,
  idempotencyParameter,
  json,
  orderIdParameter,
  problems,
  queryParameters,
  schemaOf,
  security,
  skuParameter,
} from './openapi-operations.js';
import { customerOrdersQuery, skuListQuery } from './schemas.js';

/** The OpenAPI document's paths of the stock itself: SKUs and their administration, orders and their lifecycle. */
export function stockPaths(): Record<string, unknown> {
  return {
    '/skus': {
      get: {
        tags: ['skus'],
        operationId: 'listSkus',
        summary: 'SKUs by name, a page at a time, with filters',
        description:
          'Each SKU as `GET /skus/{sku}` gives it, without `segmentStock`, in bytewise order of names. Pass ' +
          '`nextCursor` back as `cursor`, with the same filters: SKUs created meanwhile neither shift nor repeat a ' +
          `page. A filtered page looks at ${MAX_SKUS_SCANNED.toLocaleString('en')} SKUs at most, so it may hold ` +
          `fewer than \`limit\` (even none) while \`nextCursor\` is not null. Any credential.${OPEN_UNTIL_KEYS}`,
        security: security([], true, true),
        parameters: queryParameters(skuListQuery.shape),
        responses: {
          '200': { description: 'A page; `nextCursor` fetches the next.', content: json('SkuPage') },
          ...problems(...ALWAYS, 'unauthorized', 'invalid_token', 'bad_request', 'dependency_unavailable'),
        },
      },
      post: {
        tags: ['skus'],
        operationId: 'createSku',
        summary: 'Create a SKU with its stock spread over segments',
        security: adminSecurity,
        parameters: [idempotencyParameter],
        requestBody: body('CreateSku'),
        responses: {
          '201': { description: 'Created; `Location: /skus/{sku}`.', content: json('SkuView') },
          '200': { description: 'An idempotent replay (`Idempotent-Replayed: true`).', content: json('SkuView') },
          ...problems(...ALWAYS, ...WRITE, ...ADMIN, 'sku_exists', 'stock_limit_exceeded', 'dependency_unavailable'),
        },
      },
    },
    '/skus/{sku}': {
      get: {
        tags: ['skus'],
        operationId: 'getSku',
        summary: "A SKU's stock and segments",
        description: `Any credential.${OPEN_UNTIL_KEYS}`,
        security: security([], true, true),
        parameters: [skuParameter],
        responses: {
          '200': { description: 'The SKU.', content: json('SkuView') },
          ...problems(
            ...ALWAYS,
            'unauthorized',
            'invalid_token',
            'bad_request',
            'sku_not_found',
            'dependency_unavailable',
          ),
        },
      },
      patch: {
        tags: ['skus'],
        operationId: 'updateSku',
        summary: 'Set or remove (null) the per-customer limit, the low-stock threshold and the sale window',
        description:
          'Any of `maxPerCustomer`, `lowStockThreshold`, `saleStartsAt`, `saleEndsAt`; `null` removes that one. A ' +
          'window change takes effect on every instance at once (a change notice), by the shared clock.',
        security: adminSecurity,
        parameters: [skuParameter],
        requestBody: body('UpdateSku'),
        responses: {
          '200': { description: 'The SKU.', content: json('SkuView') },
          ...problems(...ALWAYS, ...WRITE, ...AUTH, 'sku_not_found', 'dependency_unavailable'),
        },
      },
    },
    '/skus/{sku}/segments': {
      put: {
        tags: ['skus'],
        operationId: 'resegmentSku',
        summary: 'Spread the remaining stock over another number of segments, while orders flow',
        security: adminSecurity,
        parameters: [skuParameter, idempotencyParameter],
        requestBody: body('Resegment'),
        responses: {
          '200': { description: 'The SKU in its new layout.', content: json('SkuView') },
          ...problems(...ALWAYS, ...WRITE, ...ADMIN, 'sku_not_found', 'lock_busy', 'dependency_unavailable'),
        },
      },
    },
    '/skus/{sku}/restock': {
      post: {
        tags: ['skus'],
        operationId: 'restockSku',
        summary: 'Add stock, spread over the segments',
        security: adminSecurity,
        parameters: [skuParameter, idempotencyParameter],
        requestBody: body('Restock'),
        responses: {
          '200': { description: 'The SKU after the restock.', content: json('SkuView') },
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...ADMIN,
            'sku_not_found',
            'stock_limit_exceeded',
            'lock_busy',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/skus/{sku}/adjustments': {
      post: {
        tags: ['skus'],
        operationId: 'adjustSku',
        summary: 'Add or remove units, with a reason',
        description:
          '`delta` units are added (spread over the segments like a restock) or removed (from the fullest segments, ' +
          'under every segment lock, fenced like a restock, so orders flowing meanwhile are counted exactly). A ' +
          'removal larger than what is available is refused whole (`out_of_stock`, with `available`). `reason` is ' +
          'one of the list; `other` needs a `note`. The credential is recorded as the actor.',
        security: adminSecurity,
        parameters: [skuParameter, idempotencyParameter],
        requestBody: body('Adjustment'),
        responses: {
          '200': { description: 'The SKU after it, with the movement recorded.', content: json('SkuChange') },
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...ADMIN,
            'sku_not_found',
            'out_of_stock',
            'stock_limit_exceeded',
            'lock_busy',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/skus/{sku}/stock': {
      put: {
        tags: ['skus'],
        operationId: 'setCountedStock',
        summary: 'Set what is available to a counted quantity, if it is still what the caller saw',
        description:
          'Under every segment lock: when `available` is still `compareAvailable`, it becomes the counted ' +
          '`available`; otherwise `stale_count` with the current value, and nothing changes. Without a compare the ' +
          'set needs `ignoreCompare: true` (it may overwrite orders placed since the count). Reserved and sold units ' +
          'are never touched; the difference is recorded as the movement (`quantity`).',
        security: adminSecurity,
        parameters: [skuParameter, idempotencyParameter],
        requestBody: body('CountedStock'),
        responses: {
          '200': { description: 'The SKU after it, with the movement recorded.', content: json('SkuChange') },
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...ADMIN,
            'sku_not_found',
            'stale_count',
            'stock_limit_exceeded',
            'lock_busy',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/orders': {
      get: {
        tags: ['orders'],
        operationId: 'listCustomerOrders',
        summary: "A customer's orders, newest first, a page at a time",
        description:
          '`customerId` is required with a service key; a customer token lists its own orders (naming another ' +
          'customer is `forbidden`).',
        security: security(['orders:read'], true),
        parameters: Object.entries(customerOrdersQuery.shape).map(([name, schema]) => ({
          name,
          in: 'query',
          required: !schema.safeParse(undefined).success,
          schema: schemaOf(schema),
        })),
        responses: {
          '200': { description: 'A page; `nextCursor` fetches the next.', content: json('OrderPage') },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'dependency_unavailable'),
        },
      },
      post: {
        tags: ['orders'],
        operationId: 'placeOrder',
        summary: 'Place an order: deduct its quantity from one or more segments',
        description:
          'A customer token places for its own customer (`customerId` may be left out; another one is ' +
          `\`forbidden\`), and its orders count against that customer's limits.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:place'], true, true),
        parameters: [idempotencyParameter],
        requestBody: body('PlaceOrder'),
        responses: {
          '201': { description: 'Placed; `Location: /orders/{id}`.', content: json('Order') },
          '200': {
            description: 'The order placed earlier with this Idempotency-Key (`Idempotent-Replayed: true`).',
            content: json('Order'),
          },
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...AUTH,
            'invalid_idempotency_key',
            'idempotency_key_reused',
            'customer_required',
            'sku_not_found',
            'out_of_stock',
            'not_on_sale',
            'purchase_limit',
            'line_required',
            'rate_limited',
            'lock_busy',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/orders/{id}': {
      get: {
        tags: ['orders'],
        operationId: 'getOrder',
        summary: 'An order and the segments it took from',
        description: `Another customer's order answers to a customer token as an unknown id does.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:read'], true, true),
        parameters: [orderIdParameter],
        responses: {
          '200': { description: 'The order.', content: json('Order') },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'order_not_found', 'dependency_unavailable'),
        },
      },
    },
    '/orders/{id}/confirm': {
      post: {
        tags: ['orders'],
        operationId: 'confirmOrder',
        summary: 'Confirm a reservation: its units are sold',
        description: `A customer token confirms its own orders only.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:place', 'orders:manage'], true, true),
        parameters: [orderIdParameter],
        responses: {
          '200': { description: 'The confirmed order.', content: json('Order') },
          ...problems(
            ...ALWAYS,
            ...AUTH,
            'bad_request',
            'order_not_found',
            'order_not_reserved',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/orders/{id}/cancel': {
      post: {
        tags: ['orders'],
        operationId: 'cancelOrder',
        summary: 'Cancel an order: its units go back to their segments',
        description:
          'A reservation: `orders:place` or `orders:manage`, or a customer token for its own order. A confirmed ' +
          'order (a refund): `orders:manage` only, or a customer token where `CUSTOMER_CANCEL_CONFIRMED` allows ' +
          "it; else `forbidden`, decided under the order's lock so that an order confirmed meanwhile is refused " +
          'too. Cancelling a reservation is open to every caller until `API_KEYS_FILE` or a customer issuer is ' +
          'configured; a confirmed order then needs `orders:manage`.',
        security: security(['orders:place', 'orders:manage'], true, true),
        parameters: [orderIdParameter],
        responses: {
          '200': { description: 'The cancelled order.', content: json('Order') },
          ...problems(
            ...ALWAYS,
            ...AUTH,
            'bad_request',
            'order_not_found',
            'order_not_reserved',
            'lock_busy',
            'dependency_unavailable',
          ),
        },
      },
    },
  };
}
