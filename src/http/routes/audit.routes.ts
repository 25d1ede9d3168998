import { type RequestHandler, Router } from 'express';
import type { Db } from '../../db/database.js';
import { readAuditReport } from '../../audit/audit-report.js';
import { methodNotAllowed } from '../method-not-allowed.js';

/** `GET /audit`: the SKUs whose books the audit found off and what is off, and when it last ran; for admins. */
export function auditRoutes(db: Db, requireAdmin: RequestHandler): Router {
  const router = Router();
  router
    .route('/')
    .get(requireAdmin, async (_req, res) => {
      res.set('Cache-Control', 'no-store').json(await readAuditReport(db));
    })
    .all(methodNotAllowed('GET'));
  return router;
}
