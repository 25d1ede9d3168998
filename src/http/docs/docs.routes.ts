import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import express, { Router } from 'express';
import { methodNotAllowed } from '../method-not-allowed.js';
import { buildOpenApi } from '../openapi.js';
import { pageHeaders } from '../security.js';

const publicDir = fileURLToPath(new URL('./public/', import.meta.url));
// Swagger UI's files straight from its npm package: nothing from a CDN.
const swaggerUiDir = path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));

/** Swagger UI styles its widgets inline and shows data: images: allowed here, on the docs page only. */
const DOCS_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; " +
  "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const docsPolicy = pageHeaders(DOCS_POLICY);

/** `GET /openapi.json`, mounted there: the document, built once from the schemas. */
export function openApiRoutes(): Router {
  const router = Router();
  const document = buildOpenApi();
  router
    .route('/')
    .get((_req, res) => {
      res.json(document);
    })
    .all(methodNotAllowed('GET'));
  return router;
}

/** `GET /docs`, mounted there: Swagger UI over `/openapi.json`, its files and the page's own. */
export function docsRoutes(): Router {
  const router = Router();
  router
    .route('/')
    .get(docsPolicy, (_req, res) => {
      res.sendFile('index.html', { root: publicDir });
    })
    .all(methodNotAllowed('GET'));

  router.use('/ui', docsPolicy, express.static(swaggerUiDir, { index: false }));
  router.use(docsPolicy, express.static(publicDir, { index: false }));
  return router;
}
