import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { errorCatalog } from '../../src/errors.js';
import { buildOpenApi } from '../../src/http/openapi.js';
import { serviceKey, writeKeysFile } from '../security/credentials.js';
import { call, type RunningService, startService } from '../support/service.js';

const ADMIN_TOKEN = `oas-${randomBytes(12).toString('hex')}`;
// With service keys configured every route that lists a security requirement needs a credential.
const API_KEYS_FILE = writeKeysFile([serviceKey('ops', ['stock:admin'])]);
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

/** What express's router (`router` 2.3's `listRoutes`) tells of each route and mounted router. */
interface ListsRoutes {
  listRoutes(): { path: string; methods: string[] | undefined; router: ListsRoutes | undefined }[];
}

/** `METHOD /path/{param}` of every route the express app mounts, mounted routers' routes under their paths. */
function mountedRoutes(router: ListsRoutes, prefix = ''): string[] {
  return router.listRoutes().flatMap(({ path, methods, router: mounted }) => {
    const full = prefix + (path === '/' ? '' : path);
    if (mounted) return mountedRoutes(mounted, full);
    // `*` is a route's catch-all (the 405 answer), HEAD the one express adds to every GET.
    const documentable = methods!.filter((method) => method !== '*' && method !== 'HEAD');
    return documentable.map((method) => `${method} ${(full || '/').replace(/:(\w+)/g, '{$1}')}`);
  });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the document, walked by shape
const document = buildOpenApi() as any;
const documented: string[] = Object.entries<Record<string, unknown>>(document.paths).flatMap(([path, item]) =>
  METHODS.filter((method) => method in item).map((method) => `${method.toUpperCase()} ${path}`),
);

describe('the OpenAPI document', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN, API_KEYS_FILE });
  });
  afterAll(() => svc.stop());

  it('is what docs/api.yaml holds (run `npm run openapi` after changing a route or schema)', () => {
    expect(parse(readFileSync('docs/api.yaml', 'utf8'))).toEqual(JSON.parse(JSON.stringify(document)));
  });

  it('documents every route the app mounts, and every documented route is mounted', () => {
    const app = (svc.service as unknown as { app: { router: ListsRoutes } }).app;
    const mounted = [...new Set(mountedRoutes(app.router))].sort();
    expect(mounted.length).toBeGreaterThan(5);
    expect(mounted).toEqual([...documented].sort());
  });

  it('is served at GET /openapi.json, browsable at GET /docs from the package’s own files', async () => {
    const served = await call(svc.url, 'GET', '/openapi.json');
    expect(served.status).toBe(200);
    expect(served.body).toEqual(JSON.parse(JSON.stringify(document)));
    const page = await call(svc.url, 'GET', '/docs');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    for (const src of (page.body as string).matchAll(/(?:src|href)="([^"]+)"/g)) {
      expect(src[1], 'a file of the service, not a CDN').toMatch(/^\/docs\//);
      expect((await call(svc.url, 'GET', src[1]!)).status, src[1]).toBe(200);
    }
  });

  it('marks exactly the routes that need a credential (once service keys are configured) with a security scheme', async () => {
    for (const [path, item] of Object.entries<Record<string, { security?: Record<string, unknown>[] }>>(
      document.paths,
    )) {
      for (const method of METHODS.filter((m) => m in item)) {
        const concrete = path.replace('{sku}', 'no-such-sku').replace('{id}', '00000000-0000-4000-8000-000000000000');
        const answer = await call(svc.url, method.toUpperCase(), concrete);
        const secured = (item[method]!.security ?? []).length > 0;
        expect(answer.status === 401, `${method.toUpperCase()} ${path}`).toBe(secured);
      }
    }
  });

  it('lists every error code in the problem schema, and only those', () => {
    expect([...document.components.schemas.Problem.properties.code.enum].sort()).toEqual(
      Object.keys(errorCatalog).sort(),
    );
  });
});
