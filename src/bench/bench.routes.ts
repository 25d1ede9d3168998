import { type RequestHandler, Router } from 'express';
import { AppError } from '../errors.js';
import { jsonBody } from '../http/json-body.js';
import { methodNotAllowed } from '../http/method-not-allowed.js';
import { orderLine, skuName } from '../http/schemas.js';
import { parseOr400 } from '../http/validate.js';
import type { LockFreeBaselines } from './lock-free-baselines.js';
import { type GuardMode, guardModes, type OversellDemo } from './oversell-demo.js';

export interface BenchRouteDeps {
  demo: OversellDemo;
  baselines: LockFreeBaselines;
  requireAdmin: RequestHandler;
  maxOrderQuantity: number;
}

/**
 * Benchmark routes, mounted only when BENCH_ROUTES=1 at start (never by default): the HTTP ceiling, the oversell
 * demonstration's unguarded modes and the lock-free baselines. All but the ceiling can sell wrongly on purpose or
 * bypass the segment locks, so they also need the admin token when one is set.
 */
export function benchRoutes({ demo, baselines, requireAdmin, maxOrderQuantity }: BenchRouteDeps): Router {
  const router = Router();
  const body = orderLine(maxOrderQuantity);

  // The ceiling: the same middleware stack and body as an order, and nothing else.
  router
    .route('/bench/echo')
    .post(...jsonBody, (req, res) => {
      res.status(200).json({ echo: req.body as unknown });
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/bench/oversell/:mode')
    .post(requireAdmin, ...jsonBody, async (req, res) => {
      const mode = parseMode(req.params.mode);
      const { sku, quantity } = parseOr400(body, req.body, 'body');
      res.status(201).json(await demo.sell(mode, sku, quantity));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/bench/lock-free/pg-conditional')
    .post(requireAdmin, ...jsonBody, async (req, res) => {
      const { sku, quantity } = parseOr400(body, req.body, 'body');
      res.status(201).json(await baselines.sellConditional(sku, quantity));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/bench/lock-free/redis-counter')
    .post(requireAdmin, ...jsonBody, async (req, res) => {
      const { sku, quantity } = parseOr400(body, req.body, 'body');
      res.status(201).json(await baselines.sellFromCounter(sku, quantity));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/bench/lock-free/redis-counter/:sku')
    .get(requireAdmin, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      res.json({ sku, available: await baselines.counterStock(sku) });
    })
    .all(methodNotAllowed('GET'));

  return router;
}

function parseMode(mode: string | undefined): GuardMode {
  if (guardModes.includes(mode as GuardMode)) return mode as GuardMode;
  throw new AppError('bad_request', `mode: one of ${guardModes.join(', ')}`);
}
