import { Router } from 'express';
import { AppError } from '../../errors.js';
import type { OrderPlacement, PlacedOrder } from '../../inventory/order-placement.js';
import type { OrderRecord } from '../../orders/order.repository.js';
import type { OrderService } from '../../orders/order.service.js';
import { idempotencyKeyOf } from '../idempotency-key.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { sendProblem } from '../problem.js';
import { orderBody, orderId } from '../schemas.js';
import { parseOr400 } from '../validate.js';

export function orderRoutes(placement: OrderPlacement, orders: OrderService, maxOrderQuantity: number): Router {
  const router = Router();
  const body = orderBody(maxOrderQuantity);

  router
    .route('/orders')
    .post(...jsonBody, async (req, res) => {
      const key = idempotencyKeyOf(req);
      const { sku, quantity } = parseOr400(body, req.body, 'body');
      let placed: PlacedOrder;
      try {
        placed = await placement.place({ sku, quantity, ...(key !== undefined && { idempotencyKey: key }) });
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
    .all(methodNotAllowed('POST'));

  router
    .route('/orders/:id')
    .get(async (req, res) => {
      const id = parseOr400(orderId, req.params.id, 'id');
      res.json(orderView(await orders.get(id)));
    })
    .all(methodNotAllowed('GET'));

  return router;
}

function orderView(order: OrderRecord) {
  return {
    orderId: order.id,
    sku: order.sku,
    quantity: order.quantity,
    deductions: order.deductions,
    createdAt: order.createdAt.toISOString(),
  };
}
