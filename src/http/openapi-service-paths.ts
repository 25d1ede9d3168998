import { eventCursor, eventsQuery, eventStreamQuery } from './event-schemas.js';
import {
  ALWAYS,
  AUTH,
  adminSecurity,
  WRITE,
  body,
  eventsSecurity,
  json,
  monitoringSecurity,
  problems,
  queryParameters,
  schemaOf,
  webhookIdParameter,
  webhooksSecurity,
} from './openapi-operations.js';
import { skuName } from './schemas.js';

/** The OpenAPI document's paths around the stock: health, events and webhooks, monitoring, and the document itself. */
export function servicePaths(): Record<string, unknown> {
  return {
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
            description:
              'An endless `text/event-stream`; each `data:` is an Event. A reader that leaves more than ' +
              '`STREAM_MAX_BUFFERED_BYTES` unread gets a last `stream.closed` event whose `id:` is the last event ' +
              'sent, to resume after (`Last-Event-ID`).',
            content: { 'text/event-stream': { schema: { type: 'string' } } },
          },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'too_many_streams'),
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
          ...problems(...ALWAYS, ...WRITE, ...AUTH, 'webhook_destination_refused', 'dependency_unavailable'),
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
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...AUTH,
            'webhook_not_found',
            'webhook_destination_refused',
            'dependency_unavailable',
          ),
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
        summary:
          "Delivery attempts, newest first: delivered, retrying or failed, with the receiver's status or why none came",
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
    '/audit': {
      get: {
        tags: ['monitoring'],
        operationId: 'audit',
        summary: "The books audit's findings: SKUs whose books are off and what is off, and when it last ran",
        description:
          'Needs `stock:admin`. Any instance answers the same: the audit runs on one instance at a time and keeps its ' +
          'findings in Postgres (docs/operations.md#the-books-audit).',
        security: adminSecurity,
        responses: {
          '200': { description: 'The findings.', content: json('AuditReport') },
          ...problems(...ALWAYS, ...AUTH, 'dependency_unavailable'),
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
    '/dashboard/history': {
      get: {
        tags: ['monitoring'],
        operationId: 'dashboardHistory',
        summary: "The last hour of the fleet's and the SKU's per-second series, and the SKU's timeline",
        security: monitoringSecurity,
        parameters: [{ name: 'sku', in: 'query', required: true, schema: schemaOf(skuName) }],
        responses: {
          '200': { description: 'The history.', content: json('DashboardHistory') },
          ...problems(...ALWAYS, 'bad_request', ...AUTH, 'dependency_unavailable'),
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
            description:
              'An event stream; each `data:` line is a DashboardSnapshot. A reader that leaves more than ' +
              '`STREAM_MAX_BUFFERED_BYTES` unread gets a last `stream.closed` event.',
            content: { 'text/event-stream': { schema: { type: 'string' } } },
          },
          ...problems(...ALWAYS, 'bad_request', ...AUTH, 'too_many_streams'),
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
  };
}
