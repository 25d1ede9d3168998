import { createHash } from 'node:crypto';
import { type Request, type Response, Router } from 'express';
import type { AdminAnswer, AdminRequest } from '../../stock/admin-requests.repository.js';
import type { SkuListQuery, SkuPage } from '../../stock/sku-listing.js';
import type { MovementPage, MovementQuery } from '../../stock/movement-history.js';
import type { Movement } from '../../stock/movement.js';
import type { SkuView } from '../../stock/sku-view.js';
import type { StockAdmin } from '../../stock/stock-admin.js';
import type { Access } from '../auth/access.js';
import type { Principal } from '../auth/principal.js';
import { idempotencyKeyOf, scopeOf } from '../idempotency-key.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { movementsQuery } from '../movement-schemas.js';
import {
  adjustmentBody,
  countBody,
  createSkuBody,
  resegmentBody,
  restockBody,
  skuListQuery,
  skuName,
  updateSkuBody,
} from '../schemas.js';
import { parseOr400 } from '../validate.js';

/**
 * The SKU routes, under `/skus`. Writes need `stock:admin`; reading or listing SKUs, any credential (none until keys
 * are configured). A SKU's movement history needs `stock:admin` too: it names every customer's orders and the
 * credentials behind each change, and an order's id is all that cancelling it asks of a caller until keys exist.
 */
export function skuRoutes(
  admin: StockAdmin,
  reads: {
    listSkus: (query: SkuListQuery) => Promise<SkuPage>;
    readMovements: (sku: string, query: MovementQuery) => Promise<MovementPage>;
  },
  access: Access,
): Router {
  const router = Router();
  const requireAdmin = access.require(['stock:admin']);
  const mayRead = access.require('credential', { openUntilKeys: true });

  router
    .route('/')
    .get(mayRead, async (req, res) => {
      const { onSale, soldOut, lowStock, ...query } = parseOr400(skuListQuery, req.query, 'query');
      res.json(
        await reads.listSkus({ ...query, onSale: flag(onSale), soldOut: flag(soldOut), lowStock: flag(lowStock) }),
      );
    })
    .post(requireAdmin, jsonBody, async (req, res) => {
      const input = parseOr400(createSkuBody, req.body, 'body');
      const answer = await admin.create(input, adminRequest(req, access.principalOf(res), ['create', input]));
      res.location(`/skus/${encodeURIComponent(answer.view.sku)}`);
      send(res, answer);
    })
    .all(methodNotAllowed('GET', 'POST'));

  router
    .route('/:sku')
    .get(mayRead, async (req, res) => {
      res.json(await admin.view(parseOr400(skuName, req.params.sku, 'sku')));
    })
    .patch(requireAdmin, jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const changes = parseOr400(updateSkuBody, req.body, 'body');
      // A limit alone keeps the fingerprint it always had, so keys stored before thresholds and windows still replay.
      const asked =
        Object.keys(changes).length === 1 && 'maxPerCustomer' in changes
          ? ['limit', sku, changes.maxPerCustomer]
          : ['update', sku, changes];
      send(res, await admin.update(sku, changes, adminRequest(req, access.principalOf(res), asked)));
    })
    .all(methodNotAllowed('GET', 'PATCH'));

  router
    .route('/:sku/movements')
    .get(requireAdmin, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { kind, since, until, ...page } = parseOr400(movementsQuery, req.query, 'query');
      res.json(
        await reads.readMovements(sku, {
          ...page,
          kinds: kind,
          since: since === undefined ? undefined : new Date(since),
          until: until === undefined ? undefined : new Date(until),
        }),
      );
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/:sku/segments')
    .put(requireAdmin, jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { segments } = parseOr400(resegmentBody, req.body, 'body');
      send(
        res,
        await admin.resegment(sku, segments, adminRequest(req, access.principalOf(res), ['resegment', sku, segments])),
      );
    })
    .all(methodNotAllowed('PUT'));

  router
    .route('/:sku/restock')
    .post(requireAdmin, jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { quantity } = parseOr400(restockBody, req.body, 'body');
      send(
        res,
        await admin.restock(sku, quantity, adminRequest(req, access.principalOf(res), ['restock', sku, quantity])),
      );
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/:sku/adjustments')
    .post(requireAdmin, jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const input = parseOr400(adjustmentBody, req.body, 'body');
      const caller = access.principalOf(res);
      const request = adminRequest(req, caller, ['adjust', sku, input]);
      send(res, await admin.adjust(sku, { ...input, actor: scopeOf(caller) }, request));
    })
    .all(methodNotAllowed('POST'));

  router
    .route('/:sku/stock')
    .put(requireAdmin, jsonBody, async (req, res) => {
      const sku = parseOr400(skuName, req.params.sku, 'sku');
      const { ignoreCompare: _ignore, ...input } = parseOr400(countBody, req.body, 'body');
      const caller = access.principalOf(res);
      const request = adminRequest(req, caller, ['count', sku, input]);
      send(res, await admin.count(sku, { ...input, actor: scopeOf(caller) }, request));
    })
    .all(methodNotAllowed('PUT'));

  return router;
}

/** A `true` / `false` query parameter; undefined when not given. */
const flag = (value: 'true' | 'false' | undefined) => (value === undefined ? undefined : value === 'true');

/**
 * The request's Idempotency-Key with a fingerprint of what it asks: the write and its validated input, so the same
 * key on another route, SKU or body is told apart (422).
 */
function adminRequest(req: Request, caller: Principal, asked: unknown[]): AdminRequest | undefined {
  const key = idempotencyKeyOf(req, caller);
  if (key === undefined) return undefined;
  return { key, fingerprint: createHash('sha256').update(JSON.stringify(asked)).digest('hex') };
}

/** The answer; a replay carries the first answer's status and body, marked by Idempotent-Replayed. */
function send(res: Response, answer: AdminAnswer): void {
  if (answer.replayed) res.set('Idempotent-Replayed', 'true');
  res.status(answer.status).json(inViewOrder(answer.view));
}

const VIEW_FIELDS = [
  'sku',
  'segments',
  'stock',
  'available',
  'reserved',
  'sold',
  'maxPerCustomer',
  'lowStockThreshold',
  'saleStartsAt',
  'saleEndsAt',
  'onSale',
  'segmentStock',
] as const satisfies readonly (keyof SkuView)[];

/**
 * The view with its fields in the one order of SkuView. A replayed answer was stored in a jsonb column, which keeps
 * keys in an order of its own; a client that compares a retry's answer with the first one sees the same bytes.
 */
function inViewOrder(view: AdminAnswer['view']): AdminAnswer['view'] {
  const ordered = Object.fromEntries(VIEW_FIELDS.map((field) => [field, view[field]])) as unknown as SkuView;
  return view.movement ? { ...ordered, movement: inMovementOrder(view.movement) } : ordered;
}

const MOVEMENT_FIELDS = [
  'id',
  'kind',
  'quantity',
  'reason',
  'actor',
  'note',
  'reference',
  'orderId',
  'availableAfter',
  'at',
] as const satisfies readonly (keyof Movement)[];

const inMovementOrder = (movement: Movement): Movement =>
  Object.fromEntries(MOVEMENT_FIELDS.map((field) => [field, movement[field]])) as unknown as Movement;
