import { Router } from 'express';
import { Gauge } from 'prom-client';
import { z } from 'zod';
import type { StockService } from '../../src/app.js';
import { jsonBody } from '../../src/http/json-body.js';
import { methodNotAllowed } from '../../src/http/method-not-allowed.js';
import { orderLine, skuName } from '../../src/http/schemas.js';
import { parseOr400 } from '../../src/http/validate.js';
import { benchStockKey, guardModes, unguardedSales } from './unguarded-sales.js';

// Mounted only by the load test's entry point (bench-main.ts). All but the ceiling sell wrongly on purpose or bypass
// the segment locks, so they need the `stock:admin` scope once credentials are set.
export function benchRoutes(service: StockService): Router {
  const { config, redis, access } = service;
  const sales = unguardedSales(service);
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
      .post(requireAdmin, jsonBody, async (req, res) => {
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
    .post(jsonBody, (req, res) => void res.status(200).json({ echo: req.body as unknown }))
    .all(methodNotAllowed('POST'));
  selling('/bench/oversell/:mode', (sku, quantity, mode) =>
    sales.sellGuarded(parseOr400(z.enum(guardModes), mode, 'mode'), sku, quantity),
  );
  selling('/bench/lock-free/pg-conditional', (sku, quantity) => sales.sellConditional(sku, quantity));
  selling('/bench/lock-free/redis-counter', (sku, quantity) => sales.sellFromCounter(sku, quantity));
  router
    .route('/bench/lock-free/redis-counter/:sku')
    .get(requireAdmin, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      // null before the first sale seeded the counter.
      const available = await redis.get(benchStockKey(sku));
      res.json({ sku, available: available === null ? null : Number(available) });
    })
    .all(methodNotAllowed('GET'));
  return router;
}
