import { type RequestHandler, Router } from 'express';
import { AppError } from '../../errors.js';
import type { OrderLifecycle } from '../../reservations/order-lifecycle.js';
import type { OrderPlacement, OrderRequest } from '../../orders/order-placement.js';
import type { PlacedOrder } from '../../orders/outcome.js';
import type { OrderRecord } from '../../orders/order.repository.js';
import type { OrderService } from '../../orders/order.service.js';
import type { Access } from '../auth/access.js';
import { actingFor, boundCustomer, type Principal } from '../auth/principal.js';
import { idempotencyKeyOf } from '../idempotency-key.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { sendProblem } from '../problem.js';
import { sendJson } from '../send-json.js';
import { cartOrderBody, customerOrdersQuery, orderId, singleOrderBody } from '../schemas.js';
import { parseOr400 } from '../validate.js';

/**
 * The order routes: `place`, the handlers of `POST /orders`, and `router`, the others, under `/orders`. Placing is the
 * busiest route of all, so the app mounts it on its own router rather than inside this one, and it runs only the
 * middleware that does something in the service's mode: every layer a request passes costs it a call and a path match.
 * A customer token acts for its customer only: it places for that customer, and another customer's order answers 404
 * as an unknown id does. Service keys act by scope (Access).
 */
export function orderRoutes(
  placement: OrderPlacement,
  lifecycle: OrderLifecycle,
  orders: OrderService,
  access: Access,
  options: { maxOrderQuantity: number; limitOrders: RequestHandler | undefined },
): { place: RequestHandler[]; router: Router } {
  const router = Router();
  const single = singleOrderBody(options.maxOrderQuantity);
  const cart = cartOrderBody(options.maxOrderQuantity);
  const placing = { openUntilKeys: true };
  const mayPlace = access.guards(placing) ? [access.require(['orders:place'], placing)] : [];
  const limitOrders = options.limitOrders ? [options.limitOrders] : [];
  const mayRead = access.require(['orders:read'], { openUntilKeys: true });
  const mayList = access.require(['orders:read']);
  const mayEnd = access.require(['orders:place', 'orders:manage'], { openUntilKeys: true });

  const place: RequestHandler[] = [
    ...mayPlace,
    jsonBody,
    ...limitOrders,
    async (req, res) => {
      const caller = access.principalOf(res);
      const request = orderRequestOf(req.body, idempotencyKeyOf(req, caller), caller);
      let placed: PlacedOrder;
      try {
        placed = await placement.place(request);
      } catch (error) {
        // Refusals (orders/outcome.ts) are this route's everyday answers: sent from here rather than after a walk
        // through the remaining routers to the error handler, which a sold-out SKU would pay on every order.
        if (!(error instanceof AppError)) throw error;
        sendProblem(res, error);
        return;
      }
      res.setHeader('Location', `/orders/${placed.order.id}`);
      if (placed.replayed) res.setHeader('Idempotent-Replayed', 'true');
      sendJson(res, placed.replayed ? 200 : 201, orderView(placed.order));
    },
  ];

  router
    .route('/')
    .get(mayList, async (req, res) => {
      const query = parseOr400(customerOrdersQuery, req.query, 'query');
      const customerId = actingFor(access.principalOf(res), query.customerId, 'orders:read');
      if (customerId === undefined) throw new AppError('bad_request', 'customerId: required');
      const page = await orders.listForCustomer(customerId, { limit: query.limit, cursor: query.cursor });
      res.json({ orders: page.orders.map(orderView), nextCursor: page.nextCursor });
    })
    .all(methodNotAllowed('GET', 'POST'));

  router
    .route('/:id')
    .get(mayRead, async (req, res) => {
      const id = parseOr400(orderId, req.params.id, 'id');
      res.json(orderView(await orders.get(id, boundCustomer(access.principalOf(res)))));
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/:id/confirm')
    .post(mayEnd, async (req, res) => {
      const id = parseOr400(orderId, req.params.id, 'id');
      await ownOrder(access.principalOf(res), id);
      res.json(orderView(await lifecycle.confirm(id)));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/:id/cancel')
    .post(mayEnd, async (req, res) => {
      const id = parseOr400(orderId, req.params.id, 'id');
      const principal = access.principalOf(res);
      await ownOrder(principal, id);
      try {
        res.json(orderView(await lifecycle.cancel(id, { allowConfirmed: access.mayCancelConfirmed(principal) })));
      } catch (error) {
        // Found confirmed under the order's lock, so an order confirmed a moment ago is refused too.
        if (!(error instanceof AppError && error.code === 'forbidden')) throw error;
        throw access.refuse(principal, ['orders:manage'], 'cancelling a confirmed order');
      }
    })
    .all(methodNotAllowed('POST'));

  return { place, router };

  /** A customer token's own order (404 for another customer's, as for an unknown id); any order for other callers. */
  async function ownOrder(principal: Principal, id: string): Promise<void> {
    const customerId = boundCustomer(principal);
    if (customerId !== undefined) await orders.get(id, customerId);
  }

  /**
   * Either body: one SKU (`{sku, quantity}`) or a cart (`{items: [...]}`). A customer token places for its own
   * customer, named in the body or not.
   */
  function orderRequestOf(body: unknown, idempotencyKey: string | undefined, principal: Principal): OrderRequest {
    const isCart = typeof body === 'object' && body !== null && 'items' in body;
    const {
      customerId: named,
      holdSeconds,
      ...asked
    } = isCart ? parseOr400(cart, body, 'body') : parseOr400(single, body, 'body');
    const customerId = actingFor(principal, named, 'orders:place');
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
 * `deductions`), so that clients written for single-SKU orders read it unchanged.
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
