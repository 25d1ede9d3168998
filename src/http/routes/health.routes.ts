import { Router } from 'express';

/** Liveness answers while the process runs; readiness only while Redis and Postgres both answer. */
export function healthRoutes(isReady: () => Promise<boolean>): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    const ready = await isReady();
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'unavailable' });
  });
  return router;
}
