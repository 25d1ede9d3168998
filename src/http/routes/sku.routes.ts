import { type RequestHandler, Router } from 'express';
import type { StockAdmin } from '../../inventory/stock-admin.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { createSkuBody, resegmentBody, restockBody, skuName } from '../schemas.js';
import { parseOr400 } from '../validate.js';

export function skuRoutes(admin: StockAdmin, requireAdmin: RequestHandler): Router {
  const router = Router();

  router
    .route('/skus')
    .post(requireAdmin, ...jsonBody, async (req, res) => {
      const input = parseOr400(createSkuBody, req.body, 'body');
      const view = await admin.create(input);
      res
        .status(201)
        .location(`/skus/${encodeURIComponent(view.sku)}`)
        .json(view);
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/skus/:sku')
    .get(async (req, res) => {
      res.json(await admin.view(parseOr400(skuName, req.params.sku, 'sku')));
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/skus/:sku/segments')
    .put(requireAdmin, ...jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { segments } = parseOr400(resegmentBody, req.body, 'body');
      res.json(await admin.resegment(sku, segments));
    })
    .all(methodNotAllowed('PUT'));

  router
    .route('/skus/:sku/restock')
    .post(requireAdmin, ...jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { quantity } = parseOr400(restockBody, req.body, 'body');
      res.json(await admin.restock(sku, quantity));
    })
    .all(methodNotAllowed('POST'));

  return router;
}
