import { Router } from 'express';
import { Gauge } from 'prom-client';
import type { StockService } from '../../src/app.js';
import { AppError } from '../../src/errors.js';
import { jsonBody } from '../../src/http/json-body.js';
import { methodNotAllowed } from '../../src/http/method-not-allowed.js';
import { orderLine, skuName } from '../../src/http/schemas.js';
import { parseOr400 } from '../../src/http/validate.js';
import { type GuardMode, guardModes, UnguardedSales } from './unguarded-sales.js';

// Mounted only by the load test's entry point (bench-main.ts). All but the ceiling sell wrongly on purpose or bypass
// the segment locks, so they need the `stock:admin` scope once credentials are set.
export function benchRoutes(service: StockService): Router {
  const { config, db, redis, locks, access } = service;
  const sales = new UnguardedSales(db, redis, locks, {
    lockWaitMs: config.lockWaitMs,
    criticalSectionDelayMs: config.criticalSectionDelayMs,
  });
  const requireAdmin = access.require(['stock:admin']);
  const body = orderLine(config.maxOrderQuantity);
  const router = Router();
  // Beside stock_orders_in_progress: a round's stragglers here may still commit, so the load test waits for both to be 0.
  const inProgress = new Gauge({
    name: 'bench_sales_in_progress',
    help: 'Benchmark sales started and not yet answered.',
    registers: [service.metrics.registry],
  });
  /** A POST route that sells one order line its own way and answers 201 with the sale. */
  const selling = (path: string, sell: (sku: string, quantity: number, mode?: string) => Promise<unknown>) =>
    router
      .route(path)
      .post(requireAdmin, ...jsonBody, async (req, res) => {
        const { sku, quantity } = parseOr400(body, req.body, 'body');
        inProgress.inc();
        try {
          res.status(201).json(await sell(sku, quantity, req.params.mode as string | undefined));
        } finally {
          inProgress.dec();
        }
      })
      .all(methodNotAllowed('POST'));

  // The ceiling: the same middleware stack and body as an order, and nothing else.
  router
    .route('/bench/echo')
    .post(...jsonBody, (req, res) => void res.status(200).json({ echo: req.body as unknown }))
    .all(methodNotAllowed('POST'));
  selling('/bench/oversell/:mode', (sku, quantity, mode) => {
    if (!guardModes.includes(mode as GuardMode))
      throw new AppError('bad_request', `mode: one of ${guardModes.join(', ')}`);
    return sales.sellGuarded(mode as GuardMode, sku, quantity);
  });
  selling('/bench/lock-free/pg-conditional', (sku, quantity) => sales.sellConditional(sku, quantity));
  selling('/bench/lock-free/redis-counter', (sku, quantity) => sales.sellFromCounter(sku, quantity));
  router
    .route('/bench/lock-free/redis-counter/:sku')
    .get(requireAdmin, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      res.json({ sku, available: await sales.counterStock(sku) });
    })
    .all(methodNotAllowed('GET'));
  return router;
}
