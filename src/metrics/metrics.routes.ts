import { Router } from 'express';
import { methodNotAllowed } from '../http/method-not-allowed.js';
import type { ServiceMetrics } from './service-metrics.js';

/** `GET /metrics` in the Prometheus text format. */
export function metricsRoutes(metrics: ServiceMetrics): Router {
  const router = Router();
  router
    .route('/metrics')
    .get(async (_req, res) => {
      const body = await metrics.registry.metrics();
      res.type(metrics.registry.contentType).send(body);
    })
    .all(methodNotAllowed('GET'));
  return router;
}
