import { z } from 'zod';
import { components } from './openapi-components.js';
import { linePaths } from './openapi-line-paths.js';
import { movementPaths } from './openapi-movement-paths.js';
import { servicePaths } from './openapi-service-paths.js';
import { stockPaths } from './openapi-stock-paths.js';

/**
 * The OpenAPI 3.1 document: its paths (src/http/openapi-stock-paths.ts, src/http/openapi-movement-paths.ts, src/http/openapi-line-paths.ts, src/http/openapi-service-paths.ts, built from
 * src/http/openapi-operations.ts) over the named schemas of src/http/openapi-components.ts (the zod schemas that
 * validate requests, and the answers' shapes), with every problem code from errorCatalog. Served at GET
 * /openapi.json; `npm run openapi` writes it to docs/api.yaml, and a test fails when that file is stale or when a
 * mounted route is missing from it.
 */

/** The API's version: raise it when the API changes. */
const API_VERSION = '0.1.0';

export function buildOpenApi(): Record<string, unknown> {
  const { schemas } = z.toJSONSchema(components, { uri: (id) => `#/components/schemas/${id}` });
  // The document says which dialect; the $ids zod adds would only repeat each component's own address.
  for (const schema of Object.values(schemas)) {
    delete schema.$schema;
    delete schema.$id;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Segmented stock service',
      version: API_VERSION,
      summary: "Sells a SKU's stock without overselling, with the stock split into segments under their own locks.",
      description:
        'Request bodies are strict JSON of at most 16 KiB. Every error is an RFC 9457 problem document with a stable `code` ' +
        '(docs/errors.md). Callers send `Authorization: Bearer <credential>`: a service key (`serviceKey`, with the ' +
        'scopes listed per operation; `ADMIN_TOKEN` holds them all, `METRICS_TOKEN` `metrics:read` and `events:read`) or a customer ' +
        "token (`customerToken`, a JWT acting for the customer in its `sub`, on that customer's orders only). With " +
        'nothing configured every route is open (loopback only); with only `ADMIN_TOKEN`/`METRICS_TOKEN`, the ' +
        'operations whose security lists the empty requirement (`{}`) stay open; with `API_KEYS_FILE` or a customer issuer, every operation listing a ' +
        'security requirement needs one of them. 401 (`unauthorized`, `invalid_token`) means no valid credential, ' +
        '403 `forbidden` a valid one without the scope.',
    },
    servers: [{ url: 'http://127.0.0.1:3000', description: 'npm start' }],
    tags: [
      { name: 'skus' },
      { name: 'orders' },
      { name: 'lines' },
      { name: 'events' },
      { name: 'webhooks' },
      { name: 'health' },
      { name: 'monitoring' },
      { name: 'docs' },
    ],
    paths: {
      ...stockPaths(),
      ...movementPaths(),
      ...linePaths(),
      ...servicePaths(),
    },
    components: {
      schemas,
      securitySchemes: {
        serviceKey: {
          type: 'http',
          scheme: 'bearer',
          description:
            'A key of API_KEYS_FILE with its scopes (orders:place, orders:read, orders:manage, stock:admin, ' +
            'metrics:read, events:read, webhooks:manage); ADMIN_TOKEN holds every scope, METRICS_TOKEN ' +
            'metrics:read and events:read.',
        },
        customerToken: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'JWT',
          description:
            "A JWT of the customer issuer (CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET): acts for the customer in `sub`, on that customer's orders only.",
        },
      },
    },
  };
}
