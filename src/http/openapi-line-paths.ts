import { z } from 'zod';
import { components } from './openapi-components.js';
import {
  ALWAYS,
  AUTH,
  OPEN_UNTIL_KEYS,
  WRITE,
  adminSecurity,
  body,
  json,
  problems,
  schemaOf,
  security,
  skuParameter,
} from './openapi-operations.js';
import { customerId, joinLineBody, lineSettingsBody, skuName, ticketId } from './schemas.js';

/** The OpenAPI document's paths of waiting lines (src/lines): a SKU's line, joining it, and its tickets. */

const lineView = z.object({
  sku: skuName,
  status: z
    .enum(['forming', 'open', 'sold_out', 'closed'])
    .describe(
      '`forming`: before the opening, joins form the pre-line; `open`: admitting in line order; `sold_out`: no unit ' +
        'can come back; `closed`: the sale window ended.',
    ),
  capacity: z.number().int().min(1),
  holdSeconds: z.number().int().min(1).describe('How long an admission holds its reservation.'),
  tickets: z.number().int().min(0),
  waiting: z.number().int().min(0).describe('Tickets not let through yet.'),
  admittedThrough: z.number().int().min(0).describe('Every ticket up to this position was let through.'),
  draw: z
    .object({
      preLineTickets: z.number().int().min(0),
      drawnAt: z.iso.datetime().nullable(),
      seed: z
        .string()
        .nullable()
        .describe(
          "The pre-line's order: its tickets sorted by the SHA-256 of this seed followed by the ticket's id, ascending.",
        ),
    })
    .describe('The draw that ordered the tickets joined before the opening.'),
  soldOutAt: z.iso.datetime().nullable(),
});

const ticketView = z.object({
  ticketId,
  sku: skuName,
  customerId,
  quantity: z.number().int().min(1),
  status: z
    .enum(['waiting', 'admitted', 'purchased', 'expired', 'cancelled', 'sold_out', 'closed', 'refused'])
    .describe(
      '`admitted`: a reservation was made for the ticket (confirm it before `reservation.expiresAt`); `purchased`, ' +
        '`expired`, `cancelled`: what became of it; `sold_out`: no unit can reach the ticket any more; `closed`: the ' +
        'sale ended first; `refused`: the reservation was refused for good (`refusal`).',
    ),
  preLine: z.boolean().describe('Joined before the opening: its position comes from the draw.'),
  position: z.number().int().min(1).nullable().describe('Place in line order; null in the pre-line until the draw.'),
  ahead: z.number().int().min(0).nullable().describe('Tickets in front still waiting: only falls (while waiting).'),
  unitsAhead: z.number().int().min(0).nullable().describe('Units those tickets asked for: only falls.'),
  reservation: z.object({ orderId: z.uuid(), expiresAt: z.iso.datetime().nullable() }).nullable(),
  refusal: z.string().nullable(),
  joinedAt: z.iso.datetime(),
});

components.add(lineView, { id: 'LineView' });
components.add(ticketView, { id: 'Ticket' });
components.add(lineSettingsBody, { id: 'LineSettings' });
// Generated with the default MAX_ORDER_QUANTITY, as PlaceOrder is.
components.add(joinLineBody(1000), { id: 'JoinLine' });

const ticketIdParameter = { name: 'id', in: 'path', required: true, schema: schemaOf(ticketId) };

export function linePaths(): Record<string, unknown> {
  return {
    '/skus/{sku}/line': {
      get: {
        tags: ['lines'],
        operationId: 'getLine',
        summary: "A SKU's waiting line: its state, size and draw",
        description: `Any credential.${OPEN_UNTIL_KEYS}`,
        security: security([], true, true),
        parameters: [skuParameter],
        responses: {
          '200': { description: 'The line.', content: json('LineView') },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'sku_not_found', 'line_not_found', 'dependency_unavailable'),
        },
      },
      put: {
        tags: ['lines'],
        operationId: 'putLine',
        summary: 'Sell a SKU through a waiting line, or change its settings',
        description:
          'From then on the SKU takes no direct orders (`line_required`): customers join the line, and units are ' +
          'reserved for their tickets in line order, each held for `holdSeconds`. Joins before the sale window ' +
          'opens form a pre-line, ordered by a draw at the opening.',
        security: adminSecurity,
        parameters: [skuParameter],
        requestBody: body('LineSettings'),
        responses: {
          '200': { description: 'The line.', content: json('LineView') },
          ...problems(...ALWAYS, ...WRITE, ...AUTH, 'sku_not_found', 'dependency_unavailable'),
        },
      },
      post: {
        tags: ['lines'],
        operationId: 'joinLine',
        summary: "Join a SKU's line: one ticket per customer",
        description:
          'A customer token joins as its own customer; other callers name `customerId`. Joining again answers the ' +
          `same ticket (200). Counted against the per-minute order limit.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:place'], true, true),
        parameters: [skuParameter],
        requestBody: body('JoinLine'),
        responses: {
          '201': { description: 'A new ticket; `Location: /line-tickets/{id}`.', content: json('Ticket') },
          '200': { description: "The customer's ticket, joined before.", content: json('Ticket') },
          ...problems(
            ...ALWAYS,
            ...WRITE,
            ...AUTH,
            'customer_required',
            'sku_not_found',
            'line_not_found',
            'line_full',
            'line_closed',
            'purchase_limit',
            'rate_limited',
            'dependency_unavailable',
          ),
        },
      },
    },
    '/line-tickets/{id}': {
      get: {
        tags: ['lines'],
        operationId: 'getTicket',
        summary: 'A ticket: waiting (and how much of the line is ahead), admitted, or how it ended',
        description: `A customer token reads its own tickets only.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:read'], true, true),
        parameters: [ticketIdParameter],
        responses: {
          '200': { description: 'The ticket.', content: json('Ticket') },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'ticket_not_found', 'dependency_unavailable'),
        },
      },
    },
    '/line-tickets/{id}/stream': {
      get: {
        tags: ['lines'],
        operationId: 'streamTicket',
        summary: 'A ticket as server-sent events, one on every change, until its status is final',
        description: `Each \`ticket\` event's \`data:\` is a Ticket.${OPEN_UNTIL_KEYS}`,
        security: security(['orders:read'], true, true),
        parameters: [ticketIdParameter],
        responses: {
          '200': {
            description:
              'A `text/event-stream` that ends once the ticket is purchased, expired, cancelled, sold out, closed or refused.',
            content: { 'text/event-stream': { schema: { type: 'string' } } },
          },
          ...problems(
            ...ALWAYS,
            ...AUTH,
            'bad_request',
            'ticket_not_found',
            'too_many_streams',
            'dependency_unavailable',
          ),
        },
      },
    },
  };
}
