import { ALWAYS, AUTH, json, problems, queryParameters, security, skuParameter } from './openapi-operations.js';
import { movementsQuery } from './movement-schemas.js';

/** The OpenAPI document's paths of a SKU's history: every movement of its stock, newest first. */
export function movementPaths(): Record<string, unknown> {
  return {
    '/skus/{sku}/movements': {
      get: {
        tags: ['skus'],
        operationId: 'listSkuMovements',
        summary: "Every movement of a SKU's stock, newest first, a page at a time",
        description:
          'Read from the ledger itself: creates, restocks, adjustments and counted sets (`stock_additions`), each ' +
          "order's units taken (`order`, one per order: negative), and each order's units going back (`cancel`, " +
          '`expiry`: positive). The quantities of the whole history add up to what is available now. Pass ' +
          '`nextCursor` back as `cursor`, with the same filters: movements written meanwhile are newer than the ' +
          'first page and neither shift nor repeat the pages after it. Re-segmenting moves no units and is not a ' +
          "movement (the feed's `sku.resegmented` tells of it). Needs `stock:admin`: the history names every " +
          "customer's orders and the credentials behind each change.",
        security: security(['stock:admin'], false),
        parameters: [skuParameter, ...queryParameters(movementsQuery.shape)],
        responses: {
          '200': { description: 'A page; `nextCursor` fetches the next, older one.', content: json('MovementPage') },
          ...problems(...ALWAYS, ...AUTH, 'bad_request', 'sku_not_found', 'dependency_unavailable'),
        },
      },
    },
  };
}
