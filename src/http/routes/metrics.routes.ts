import { type RequestHandler, Router } from 'express';
import { methodNotAllowed } from '../method-not-allowed.js';
import type { ServiceMetrics } from '../../metrics/service-metrics.js';

/** `GET /metrics` in the Prometheus text format, behind the monitoring token when one is configured. */
export function metricsRoutes(metrics: ServiceMetrics, requireMonitoring: RequestHandler): Router {
  const router = Router();
  router
    .route('/')
    .get(requireMonitoring, async (_req, res) => {
      const body = await metrics.registry.metrics();
      res.type(metrics.registry.contentType).send(body);
    })
    .all(methodNotAllowed('GET'));
  return router;
}
