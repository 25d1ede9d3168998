import { z } from 'zod';
import type { Scope } from '../config.js';
import { type ErrorCode, errorCatalog } from '../errors.js';
import { eventCursor, eventsQuery, eventStreamQuery } from './event-schemas.js';
import { components } from './openapi-components.js';
import { customerOrdersQuery, idempotencyKey, orderId, skuName } from './schemas.js';

/**
 * The OpenAPI 3.1 document: its paths, here, over the named schemas of src/http/openapi-components.ts (the zod schemas
 * that validate requests, and the answers' shapes), with every problem code from errorCatalog. Served at GET
 * /openapi.json; `npm run openapi` writes it to docs/api.yaml, and a test fails when that file is stale or when a
 * mounted route is missing from it.
 */

/** A schema embedded in the document, without the dialect marker a standalone JSON Schema carries. */
function schemaOf(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema);
  return rest;
}

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
const json = (id: string) => ({ 'application/json': { schema: ref(id) } });

/** Error responses by status, each listing the codes it may carry. */
function problems(...codes: ErrorCode[]): Record<string, unknown> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = errorCatalog[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      String(status),
      {
        description: list.map((code) => `\`${code}\`: ${errorCatalog[code].title}`).join('; '),
        content: { 'application/problem+json': { schema: ref('Problem') } },
      },
    ]),
  );
}

const ALWAYS: ErrorCode[] = ['method_not_allowed', 'shutting_down', 'internal'];
const WRITE: ErrorCode[] = ['bad_request', 'invalid_json', 'body_too_large', 'unsupported_media_type'];
const AUTH: ErrorCode[] = ['unauthorized', 'invalid_token', 'forbidden'];
const ADMIN: ErrorCode[] = [...AUTH, 'invalid_idempotency_key', 'idempotency_key_reused'];

/**
 * Who may call an operation: a service key holding one of `scopes`, and/or a customer token (for its own customer's
 * orders only). Either is a bearer credential; the array of a scheme lists the scopes it needs.
 */
const security = (scopes: Scope[], customer: boolean) => [
  ...(scopes.length > 0 ? scopes.map((scope) => ({ serviceKey: [scope] })) : [{ serviceKey: [] }]),
  ...(customer ? [{ customerToken: [] }] : []),
];
const adminSecurity = security(['stock:admin'], false);
const monitoringSecurity = security(['metrics:read'], false);
const eventsSecurity = security(['events:read'], false);
const webhooksSecurity = security(['webhooks:manage'], false);
const queryParameters = (shape: Record<string, z.ZodType>) =>
  Object.entries(shape).map(([name, schema]) => ({
    name,
    in: 'query',
    required: !schema.safeParse(undefined).success,
    schema: schemaOf(schema),
  }));
const webhookIdParameter = { name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } };
const OPEN_UNTIL_KEYS =
  ' Open to every caller until `API_KEYS_FILE` or a customer issuer is configured, as with `ADMIN_TOKEN` alone.';
const skuParameter = { name: 'sku', in: 'path', required: true, schema: schemaOf(skuName) };
const idempotencyParameter = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description: 'Repeating the request with the same key answers as the first did, and changes nothing more.',
  schema: schemaOf(idempotencyKey),
};
const orderIdParameter = { name: 'id', in: 'path', required: true, schema: schemaOf(orderId) };
const body = (id: string) => ({ required: true, content: json(id) });

/** The API's version: raise it when the API changes. */
const API_VERSION = '0.1.0';

export function buildOpenApi(): Record<string, unknown> {
  const { schemas } = z.toJSONSchema(components, { uri: (id) => `#/components/schemas/${id}` });
  // The document says which dialect; the $ids zod adds would only repeat each component's own address.
  for (const schema of Object.values(schemas)) {
    delete schema.$schema;
    delete schema.$id;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Segmented stock service',
      version: API_VERSION,
      summary: "Sells a SKU's stock without overselling, with the stock split into segments under their own locks.",
      description:
        'Generated from the request schemas (`npm run openapi`): do not edit docs/api.yaml by hand. Request bodies ' +
        'are strict JSON of at most 16 KiB. Every error is an RFC 9457 problem document with a stable `code` ' +
        '(docs/errors.md). Callers send `Authorization: Bearer <credential>`: a service key (`serviceKey`, with the ' +
        'scopes listed per operation; `ADMIN_TOKEN` holds them all, `METRICS_TOKEN` `metrics:read`) or a customer ' +
        "token (`customerToken`, a JWT acting for the customer in its `sub`, on that customer's orders only). With " +
        'nothing configured every route is open (loopback only); with only `ADMIN_TOKEN`/`METRICS_TOKEN`, the ' +
        'operations marked so stay open; with `API_KEYS_FILE` or a customer issuer, every operation listing a ' +
        'security requirement needs one of them. 401 (`unauthorized`, `invalid_token`) means no valid credential, ' +
        '403 `forbidden` a valid one without the scope.',
    },
    servers: [{ url: 'http://127.0.0.1:3000', description: 'npm start' }],
    tags: [
      { name: 'skus' },
      { name: 'orders' },
      { name: 'events' },
      { name: 'webhooks' },
      { name: 'health' },
      { name: 'monitoring' },
      { name: 'docs' },
    ],
    paths: {
      '/skus': {
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
          security: security([], true),
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
          security: security(['orders:place'], true),
          parameters: [idempotencyParameter],
          requestBody: body('PlaceOrder'),
          responses: {
            '201': { description: 'Placed; `Location: /orders/{id}`.', content: json('Order') },
            '200': { description: 'The order placed earlier with this Idempotency-Key.', content: json('Order') },
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
          security: security(['orders:read'], true),
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
          security: security(['orders:place', 'orders:manage'], true),
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
          security: security(['orders:place', 'orders:manage'], true),
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
      '/healthz': {
        get: {
          tags: ['health'],
          operationId: 'liveness',
          summary: 'Liveness: 200 while the process runs, draining included',
          responses: { '200': { description: '`{"status":"ok"}`' } },
        },
      },
      '/readyz': {
        get: {
          tags: ['health'],
          operationId: 'readiness',
          summary: 'Readiness: 200 only while Redis and Postgres answer and the instance is not draining',
          responses: {
            '200': { description: '`{"status":"ready"}`' },
            ...problems('dependency_unavailable', 'shutting_down'),
          },
        },
      },
      '/events': {
        get: {
          tags: ['events'],
          operationId: 'listEvents',
          summary: 'Stock and order events in commit order, after a cursor',
          description: 'Needs `events:read` (`METRICS_TOKEN` or `ADMIN_TOKEN`) once a token is configured.',
          security: eventsSecurity,
          parameters: queryParameters(eventsQuery.shape),
          responses: {
            '200': { description: 'A page of events.', content: json('EventPage') },
            ...problems(...ALWAYS, ...AUTH, 'bad_request', 'dependency_unavailable'),
          },
        },
      },
      '/events/stream': {
        get: {
          tags: ['events'],
          operationId: 'streamEvents',
          summary: 'The feed as server-sent events (`id:` is the cursor; resumes after `Last-Event-ID`)',
          security: eventsSecurity,
          parameters: [
            ...queryParameters(eventStreamQuery.shape),
            { name: 'Last-Event-ID', in: 'header', required: false, schema: schemaOf(eventCursor) },
          ],
          responses: {
            '200': {
              description: 'An endless `text/event-stream`; each `data:` is an Event.',
              content: { 'text/event-stream': { schema: { type: 'string' } } },
            },
            ...problems(...ALWAYS, ...AUTH, 'bad_request'),
          },
        },
      },
      '/webhooks': {
        post: {
          tags: ['webhooks'],
          operationId: 'createWebhook',
          summary: 'Register an endpoint; its signing secret is in this answer only',
          security: webhooksSecurity,
          requestBody: body('CreateWebhook'),
          responses: {
            '201': { description: 'Registered; `Location: /webhooks/{id}`.', content: json('CreatedWebhook') },
            ...problems(...ALWAYS, ...WRITE, ...AUTH, 'dependency_unavailable'),
          },
        },
        get: {
          tags: ['webhooks'],
          operationId: 'listWebhooks',
          summary: 'Registered endpoints (without secrets)',
          security: webhooksSecurity,
          responses: {
            '200': { description: 'The endpoints.', content: json('WebhookList') },
            ...problems(...ALWAYS, ...AUTH, 'dependency_unavailable'),
          },
        },
      },
      '/webhooks/{id}': {
        get: {
          tags: ['webhooks'],
          operationId: 'getWebhook',
          summary: 'An endpoint and where its deliveries are',
          security: webhooksSecurity,
          parameters: [webhookIdParameter],
          responses: {
            '200': { description: 'The endpoint.', content: json('Webhook') },
            ...problems(...ALWAYS, ...AUTH, 'bad_request', 'webhook_not_found', 'dependency_unavailable'),
          },
        },
        patch: {
          tags: ['webhooks'],
          operationId: 'updateWebhook',
          summary: 'Change the URL, types, SKUs, or pause (enabled: false)',
          security: webhooksSecurity,
          parameters: [webhookIdParameter],
          requestBody: body('UpdateWebhook'),
          responses: {
            '200': { description: 'The endpoint.', content: json('Webhook') },
            ...problems(...ALWAYS, ...WRITE, ...AUTH, 'webhook_not_found', 'dependency_unavailable'),
          },
        },
        delete: {
          tags: ['webhooks'],
          operationId: 'deleteWebhook',
          summary: 'Remove an endpoint and its delivery records',
          security: webhooksSecurity,
          parameters: [webhookIdParameter],
          responses: {
            '204': { description: 'Removed.' },
            ...problems(...ALWAYS, ...AUTH, 'bad_request', 'webhook_not_found', 'dependency_unavailable'),
          },
        },
      },
      '/webhooks/{id}/deliveries': {
        get: {
          tags: ['webhooks'],
          operationId: 'listWebhookDeliveries',
          summary: 'Delivery attempts, newest first: delivered, retrying (with the answer or error) or failed',
          security: webhooksSecurity,
          parameters: [webhookIdParameter, ...queryParameters({ limit: eventsQuery.shape.limit })],
          responses: {
            '200': { description: 'The attempts.', content: json('DeliveryList') },
            ...problems(...ALWAYS, ...AUTH, 'bad_request', 'webhook_not_found', 'dependency_unavailable'),
          },
        },
      },
      '/webhooks/{id}/replay': {
        post: {
          tags: ['webhooks'],
          operationId: 'replayWebhook',
          summary: 'Deliver again every matching event after a cursor',
          security: webhooksSecurity,
          parameters: [webhookIdParameter],
          requestBody: body('ReplayWebhook'),
          responses: {
            '200': { description: 'The endpoint, moved back to the cursor.', content: json('Webhook') },
            ...problems(...ALWAYS, ...WRITE, ...AUTH, 'webhook_not_found', 'dependency_unavailable'),
          },
        },
      },
      '/metrics': {
        get: {
          tags: ['monitoring'],
          operationId: 'metrics',
          summary: 'Prometheus metrics of this instance',
          security: monitoringSecurity,
          responses: {
            '200': {
              description: 'The Prometheus text format.',
              content: { 'text/plain': { schema: { type: 'string' } } },
            },
            ...problems(...ALWAYS, ...AUTH),
          },
        },
      },
      '/dashboard': {
        get: {
          tags: ['monitoring'],
          operationId: 'dashboard',
          summary: 'The live dashboard page, holding no data (its data routes need metrics:read)',
          responses: { '200': { description: 'HTML.', content: { 'text/html': { schema: { type: 'string' } } } } },
        },
      },
      '/dashboard/skus': {
        get: {
          tags: ['monitoring'],
          operationId: 'dashboardSkus',
          summary: 'The newest 1,000 SKUs with their available stock, for the dashboard',
          security: monitoringSecurity,
          responses: {
            '200': {
              description: 'The SKUs.',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: {
                      skus: {
                        type: 'array',
                        items: {
                          type: 'object',
                          properties: { sku: { type: 'string' }, available: { type: 'integer' } },
                        },
                      },
                    },
                  },
                },
              },
            },
            ...problems(...ALWAYS, ...AUTH, 'dependency_unavailable'),
          },
        },
      },
      '/dashboard/events': {
        get: {
          tags: ['monitoring'],
          operationId: 'dashboardEvents',
          summary:
            "Server-sent events: one DashboardSnapshot of the SKU a second, shared by all of the instance's watchers",
          security: monitoringSecurity,
          parameters: [{ name: 'sku', in: 'query', required: true, schema: schemaOf(skuName) }],
          responses: {
            '200': {
              description: 'An event stream; each `data:` line is a DashboardSnapshot.',
              content: { 'text/event-stream': { schema: { type: 'string' } } },
            },
            ...problems(...ALWAYS, 'bad_request', ...AUTH),
          },
        },
      },
      '/openapi.json': {
        get: {
          tags: ['docs'],
          operationId: 'openapi',
          summary: 'This document',
          responses: {
            '200': { description: 'OpenAPI 3.1.', content: { 'application/json': { schema: { type: 'object' } } } },
          },
        },
      },
      '/docs': {
        get: {
          tags: ['docs'],
          operationId: 'docs',
          summary: 'This document, browsable (Swagger UI)',
          responses: { '200': { description: 'HTML.', content: { 'text/html': { schema: { type: 'string' } } } } },
        },
      },
    },
    components: {
      schemas,
      securitySchemes: {
        serviceKey: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A key of API_KEYS_FILE with its scopes (orders:place, orders:read, orders:manage, stock:admin, ' +
            'metrics:read); ADMIN_TOKEN holds every scope, METRICS_TOKEN metrics:read.',
        },
        customerToken: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            "A JWT of the customer issuer (CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET): acts for the customer in `sub`, on that customer's orders only.",
        },
      },
    },
  };
}
