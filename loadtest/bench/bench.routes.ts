import { Router } from 'express';
import type { StockService } from '../../src/app.js';
import { AppError } from '../../src/errors.js';
import { jsonBody } from '../../src/http/json-body.js';
import { methodNotAllowed } from '../../src/http/method-not-allowed.js';
import { orderLine, skuName } from '../../src/http/schemas.js';
import { parseOr400 } from '../../src/http/validate.js';
import { BenchSkus } from './bench-skus.js';
import { LockFreeBaselines } from './lock-free-baselines.js';
import { type GuardMode, guardModes, OversellDemo } from './oversell-demo.js';

/**
 * The benchmark routes, mounted on the service through its extension point (`StockService`'s `extraRoutes`) by the
 * load test's entry point (bench-main.ts) only; the product's own entry point never loads this file. The HTTP
 * ceiling, the oversell demonstration's unguarded modes and the lock-free baselines. All but the ceiling can sell
 * wrongly on purpose or bypass the segment locks, so they also need the `stock:admin` scope once credentials are configured.
 */
export function benchRoutes(service: StockService): Router {
  const { config, db, redis, locks, access } = service;
  const skus = new BenchSkus(db);
  const demo = new OversellDemo(db, locks, skus, {
    lockWaitMs: config.lockWaitMs,
    criticalSectionDelayMs: config.criticalSectionDelayMs,
  });
  const baselines = new LockFreeBaselines(db, redis, skus);
  const requireAdmin = access.require(['stock:admin']);
  const router = Router();
  const body = orderLine(config.maxOrderQuantity);

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
