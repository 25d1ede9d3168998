import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { type RequestHandler, Router } from 'express';
import type { Db } from '../../db/database.js';
import { readAvailableBySku } from '../../metrics/metrics.repository.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { pageHeaders } from '../security.js';
import { skuName } from '../schemas.js';
import { parseOr400 } from '../validate.js';
import type { DashboardFeed } from './dashboard-feed.js';

const publicDir = fileURLToPath(new URL('./public/', import.meta.url));
// The charting library's files straight from its npm package: nothing from a CDN.
const uplotDir = path.join(path.dirname(createRequire(import.meta.url).resolve('uplot/package.json')), 'dist');

/**
 * The page may load its own script and style and talk back to this origin, nothing else: the API's policy
 * (default-src 'none', helmet in security.ts) is widened for the dashboard's files only.
 */
const PAGE_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const pagePolicy = pageHeaders(PAGE_POLICY);

/**
 * `GET /dashboard`: a static page, open like a login form, holding no data. Its data, the SKU list, the last hour's
 * history and the event stream, need the monitoring token when one is configured.
 */
export function dashboardRoutes(feed: DashboardFeed, db: Db, requireMonitoring: RequestHandler): Router {
  const router = Router();

  router
    .route('/')
    .get(pagePolicy, (_req, res) => {
      res.set('Cache-Control', 'no-cache').sendFile('index.html', { root: publicDir });
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/skus')
    .get(requireMonitoring, async (_req, res) => {
      res.json({ skus: await readAvailableBySku(db, 1000) });
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/history')
    .get(requireMonitoring, async (req, res) => {
      res.set('Cache-Control', 'no-store').json(await feed.history(parseOr400(skuName, req.query.sku, 'sku')));
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/events')
    .get(requireMonitoring, (req, res) => {
      feed.subscribe(parseOr400(skuName, req.query.sku, 'sku'), req, res);
    })
    .all(methodNotAllowed('GET'));

  router.use('/uplot', pagePolicy, express.static(uplotDir, { index: false }));
  router.use(pagePolicy, express.static(publicDir, { index: false, fallthrough: true }));
  return router;
}
