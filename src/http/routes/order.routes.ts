import { Router } from 'express';
import { AppError } from '../../errors.js';
import type { OrderLifecycle } from '../../inventory/order-lifecycle.js';
import type { OrderPlacement, OrderRequest, PlacedOrder } from '../../inventory/order-placement.js';
import type { OrderRecord } from '../../orders/order.repository.js';
import type { OrderService } from '../../orders/order.service.js';
import { idempotencyKeyOf } from '../idempotency-key.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { sendProblem } from '../problem.js';
import { cartOrderBody, customerOrdersQuery, orderId, singleOrderBody } from '../schemas.js';
import { parseOr400 } from '../validate.js';

export function orderRoutes(
  placement: OrderPlacement,
  lifecycle: OrderLifecycle,
  orders: OrderService,
  maxOrderQuantity: number,
): Router {
  const router = Router();
  const single = singleOrderBody(maxOrderQuantity);
  const cart = cartOrderBody(maxOrderQuantity);

  router
    .route('/orders')
    .post(...jsonBody, async (req, res) => {
      const key = idempotencyKeyOf(req);
      const request = orderRequestOf(req.body, key);
      let placed: PlacedOrder;
      try {
        placed = await placement.place(request);
      } catch (error) {
        // Refusals (out of stock, busy) are this route's everyday answers: sent from here rather than after a walk
        // through the remaining routers to the error handler, which costs a sold-out SKU a good share of its rate.
        if (!(error instanceof AppError)) throw error;
        sendProblem(res, error);
        return;
      }
      res
        .status(placed.replayed ? 200 : 201)
        .location(`/orders/${placed.order.id}`)
        .json(orderView(placed.order));
    })
    .get(async (req, res) => {
      const query = parseOr400(customerOrdersQuery, req.query, 'query');
      const page = await orders.listForCustomer(query.customerId, { limit: query.limit, cursor: query.cursor });
      res.json({ orders: page.orders.map(orderView), nextCursor: page.nextCursor });
    })
    .all(methodNotAllowed('GET', 'POST'));

  router
    .route('/orders/:id')
    .get(async (req, res) => {
      const id = parseOr400(orderId, req.params.id, 'id');
      res.json(orderView(await orders.get(id)));
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/orders/:id/confirm')
    .post(async (req, res) => {
      res.json(orderView(await lifecycle.confirm(parseOr400(orderId, req.params.id, 'id'))));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/orders/:id/cancel')
    .post(async (req, res) => {
      res.json(orderView(await lifecycle.cancel(parseOr400(orderId, req.params.id, 'id'))));
    })
    .all(methodNotAllowed('POST'));

  return router;

  /** Either body: one SKU (`{sku, quantity}`) or a cart (`{items: [...]}`). */
  function orderRequestOf(body: unknown, idempotencyKey: string | undefined): OrderRequest {
    const isCart = typeof body === 'object' && body !== null && 'items' in body;
    const { customerId, holdSeconds, ...asked } = isCart
      ? parseOr400(cart, body, 'body')
      : parseOr400(single, body, 'body');
    return {
      lines: 'items' in asked ? asked.items : [asked],
      ...(customerId !== undefined && { customerId }),
      ...(holdSeconds !== undefined && { holdSeconds }),
      ...(idempotencyKey !== undefined && { idempotencyKey }),
    };
  }
}

/**
 * The order as clients see it. A single-SKU order also carries its line at the top level (`sku`, `quantity`,
 * `deductions`), as it did before carts existed.
 */
function orderView(order: OrderRecord) {
  const only = order.items.length === 1 ? order.items[0]! : undefined;
  return {
    orderId: order.id,
    status: order.status,
    ...(only && { sku: only.sku, quantity: only.quantity, deductions: only.deductions }),
    items: order.items,
    ...(order.customerId !== null && { customerId: order.customerId }),
    ...(order.expiresAt !== null && { expiresAt: order.expiresAt.toISOString() }),
    createdAt: order.createdAt.toISOString(),
  };
}
