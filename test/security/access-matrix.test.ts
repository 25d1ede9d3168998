import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCOPES, type Scope } from '../../src/api-keys-file.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { bearer, serviceKey, type ServiceKey, TestIssuer, writeKeysFile } from './credentials.js';

/**
 * Every route × every kind of caller, with the exact answer each gets, and proof that a refused request changed
 * nothing: the books of both SKUs and the order it aimed at are as they were.
 */

const SINGLE_SCOPES: Scope[] = [...SCOPES];
const UNKNOWN_WEBHOOK = '00000000-0000-4000-8000-000000000001';
const OWNER = 'matrix-owner';
const OTHER = 'matrix-other';

interface Fixture {
  /** The SKU orders are placed on; SKU writes go to `adminSku`. */
  orderSku: string;
  adminSku: string;
  /** An order of OWNER that reads use, never changed. */
  readOrder: string;
  /** A SKU sold through a line whose sale opens tomorrow (the line only forms), and OWNER's ticket in it. */
  lineSku: string;
  ticket: string;
}

/** The line's settings every PUT gives it: the same each time, so an allowed PUT changes nothing either. */
const LINE_SETTINGS = { capacity: 1000, holdSeconds: 120 };

/** What a case needs before it runs: the order it aims at, if any. */
type Target = 'reserved' | 'confirmed' | undefined;

interface RouteCase {
  name: string;
  target?: Target;
  request: (f: Fixture, order: string | undefined) => { method: string; path: string; body?: unknown };
  /** The answer to a caller allowed to do this. */
  success: number;
}

const routes: RouteCase[] = [
  { name: 'GET /skus', success: 200, request: () => ({ method: 'GET', path: '/skus?limit=1' }) },
  { name: 'GET /skus/{sku}', success: 200, request: (f) => ({ method: 'GET', path: `/skus/${f.orderSku}` }) },
  {
    name: 'POST /skus',
    success: 201,
    request: () => ({ method: 'POST', path: '/skus', body: { sku: uniqueSku('mx-new'), stock: 5, segments: 1 } }),
  },
  {
    name: 'PATCH /skus/{sku}',
    success: 200,
    request: (f) => ({ method: 'PATCH', path: `/skus/${f.adminSku}`, body: { maxPerCustomer: 50 } }),
  },
  {
    name: 'PUT /skus/{sku}/segments',
    success: 200,
    request: (f) => ({
      method: 'PUT',
      path: `/skus/${f.adminSku}/segments`,
      body: { segments: 2 + Math.floor(Math.random() * 4) },
    }),
  },
  {
    name: 'POST /skus/{sku}/restock',
    success: 200,
    request: (f) => ({ method: 'POST', path: `/skus/${f.adminSku}/restock`, body: { quantity: 3 } }),
  },
  {
    name: 'POST /orders',
    success: 201,
    request: (f) => ({
      method: 'POST',
      path: '/orders',
      body: { sku: f.orderSku, quantity: 1, customerId: OWNER, holdSeconds: 3600 },
    }),
  },
  {
    name: 'GET /orders?customerId',
    success: 200,
    request: () => ({ method: 'GET', path: `/orders?customerId=${OWNER}` }),
  },
  { name: 'GET /orders/{id}', success: 200, request: (f) => ({ method: 'GET', path: `/orders/${f.readOrder}` }) },
  {
    name: 'POST /orders/{id}/confirm',
    success: 200,
    target: 'reserved',
    request: (_f, order) => ({ method: 'POST', path: `/orders/${order}/confirm` }),
  },
  {
    name: 'POST /orders/{id}/cancel (reserved)',
    success: 200,
    target: 'reserved',
    request: (_f, order) => ({ method: 'POST', path: `/orders/${order}/cancel` }),
  },
  {
    name: 'POST /orders/{id}/cancel (confirmed)',
    success: 200,
    target: 'confirmed',
    request: (_f, order) => ({ method: 'POST', path: `/orders/${order}/cancel` }),
  },
  { name: 'GET /metrics', success: 200, request: () => ({ method: 'GET', path: '/metrics' }) },
  { name: 'GET /dashboard/skus', success: 200, request: () => ({ method: 'GET', path: '/dashboard/skus' }) },
  {
    name: 'GET /dashboard/events',
    success: 200,
    request: (f) => ({ method: 'GET', path: `/dashboard/events?sku=${f.orderSku}` }),
  },
  { name: 'GET /events', success: 200, request: () => ({ method: 'GET', path: '/events?limit=1' }) },
  {
    name: 'GET /events/stream',
    success: 200,
    request: (f) => ({ method: 'GET', path: `/events/stream?sku=${f.orderSku}` }),
  },
  {
    name: 'POST /webhooks',
    success: 201,
    request: () => ({
      method: 'POST',
      path: '/webhooks',
      body: { url: 'http://127.0.0.1:9/hook', types: ['sku.sold_out'] },
    }),
  },
  { name: 'GET /webhooks', success: 200, request: () => ({ method: 'GET', path: '/webhooks' }) },
  {
    name: 'PATCH /webhooks/{id} (unknown)',
    success: 404,
    request: () => ({ method: 'PATCH', path: `/webhooks/${UNKNOWN_WEBHOOK}`, body: { enabled: false } }),
  },
  {
    name: 'DELETE /webhooks/{id} (unknown)',
    success: 404,
    request: () => ({ method: 'DELETE', path: `/webhooks/${UNKNOWN_WEBHOOK}` }),
  },
  {
    name: 'GET /webhooks/{id}/deliveries (unknown)',
    success: 404,
    request: () => ({ method: 'GET', path: `/webhooks/${UNKNOWN_WEBHOOK}/deliveries` }),
  },
  {
    name: 'POST /webhooks/{id}/replay (unknown)',
    success: 404,
    request: () => ({ method: 'POST', path: `/webhooks/${UNKNOWN_WEBHOOK}/replay`, body: { after: '0' } }),
  },
  { name: 'GET /dashboard', success: 200, request: () => ({ method: 'GET', path: '/dashboard' }) },
  { name: 'GET /healthz', success: 200, request: () => ({ method: 'GET', path: '/healthz' }) },
  { name: 'GET /readyz', success: 200, request: () => ({ method: 'GET', path: '/readyz' }) },
  { name: 'GET /openapi.json', success: 200, request: () => ({ method: 'GET', path: '/openapi.json' }) },
  { name: 'GET /docs', success: 200, request: () => ({ method: 'GET', path: '/docs' }) },
];

/** A SKU's waiting line and its tickets: checked in a test of their own, so that neither test runs long. */
const lineRoutes: RouteCase[] = [
  {
    name: 'PUT /skus/{sku}/line',
    success: 200,
    request: (f) => ({ method: 'PUT', path: `/skus/${f.lineSku}/line`, body: LINE_SETTINGS }),
  },
  { name: 'GET /skus/{sku}/line', success: 200, request: (f) => ({ method: 'GET', path: `/skus/${f.lineSku}/line` }) },
  {
    // OWNER holds a ticket already: an allowed join answers that ticket (200) and adds none.
    name: 'POST /skus/{sku}/line',
    success: 200,
    request: (f) => ({ method: 'POST', path: `/skus/${f.lineSku}/line`, body: { customerId: OWNER, quantity: 1 } }),
  },
  {
    name: 'GET /line-tickets/{id}',
    success: 200,
    request: (f) => ({ method: 'GET', path: `/line-tickets/${f.ticket}` }),
  },
  {
    name: 'GET /line-tickets/{id}/stream',
    success: 200,
    request: (f) => ({ method: 'GET', path: `/line-tickets/${f.ticket}/stream` }),
  },
];

/** Routes that answer before any credential is looked at. */
const ALWAYS_OPEN = new Set(['GET /healthz', 'GET /readyz', 'GET /openapi.json', 'GET /docs']);

/** Who may do what once keys are configured: the scopes each route takes from a service key. */
const SCOPES_OF: Record<string, Scope[] | 'any'> = {
  'GET /skus': 'any',
  'GET /skus/{sku}': 'any',
  'POST /skus': ['stock:admin'],
  'PATCH /skus/{sku}': ['stock:admin'],
  'PUT /skus/{sku}/segments': ['stock:admin'],
  'POST /skus/{sku}/restock': ['stock:admin'],
  'POST /orders': ['orders:place'],
  'GET /orders?customerId': ['orders:read'],
  'GET /orders/{id}': ['orders:read'],
  'POST /orders/{id}/confirm': ['orders:place', 'orders:manage'],
  'POST /orders/{id}/cancel (reserved)': ['orders:place', 'orders:manage'],
  'POST /orders/{id}/cancel (confirmed)': ['orders:manage'],
  'PUT /skus/{sku}/line': ['stock:admin'],
  'GET /skus/{sku}/line': 'any',
  'POST /skus/{sku}/line': ['orders:place'],
  'GET /line-tickets/{id}': ['orders:read'],
  'GET /line-tickets/{id}/stream': ['orders:read'],
  'GET /metrics': ['metrics:read'],
  'GET /dashboard/skus': ['metrics:read'],
  'GET /dashboard/events': ['metrics:read'],
  'GET /events': ['events:read'],
  'GET /events/stream': ['events:read'],
  'POST /webhooks': ['webhooks:manage'],
  'GET /webhooks': ['webhooks:manage'],
  'PATCH /webhooks/{id} (unknown)': ['webhooks:manage'],
  'DELETE /webhooks/{id} (unknown)': ['webhooks:manage'],
  'GET /webhooks/{id}/deliveries (unknown)': ['webhooks:manage'],
  'POST /webhooks/{id}/replay (unknown)': ['webhooks:manage'],
};

type Caller = { kind: 'none' } | { kind: 'scope'; scope: Scope } | { kind: 'owner' | 'other' | 'expired' };
const callerName = (c: Caller) => (c.kind === 'scope' ? c.scope : c.kind);

/** The exact status each caller gets with keys and a customer issuer configured. */
function expectedClosed(route: RouteCase, caller: Caller): number {
  if (ALWAYS_OPEN.has(route.name)) return route.success;
  // The dashboard's page holds no data; only a credential that fails to verify is refused there.
  if (route.name === 'GET /dashboard') return caller.kind === 'expired' ? 401 : route.success;
  if (caller.kind === 'none' || caller.kind === 'expired') return 401;
  const scopes = SCOPES_OF[route.name]!;
  if (caller.kind === 'scope') return scopes === 'any' || scopes.includes(caller.scope) ? route.success : 403;
  // A customer token: its own orders and placing for itself; another's order is unknown to it.
  if (scopes !== 'any' && !scopes.some((s) => s.startsWith('orders:'))) return 403;
  if (route.name === 'POST /orders/{id}/cancel (confirmed)') return caller.kind === 'owner' ? 403 : 404;
  if (caller.kind === 'other') {
    // Joining for OWNER is joining for another customer; OWNER's ticket is unknown to another customer.
    if (route.name === 'POST /skus/{sku}/line') return 403;
    if (route.name.startsWith('GET /line-tickets/')) return 404;
    if (route.name === 'POST /orders' || route.name === 'GET /orders?customerId') return 403;
    if (route.name.startsWith('GET /orders/') || route.name.startsWith('POST /orders/')) return 404;
  }
  return route.success;
}

type SharedCaller = 'none' | 'admin' | 'metrics' | 'wrong';

/** The exact status each caller gets with only ADMIN_TOKEN and METRICS_TOKEN set. */
function expectedShared(route: RouteCase, caller: SharedCaller): number {
  if (ALWAYS_OPEN.has(route.name)) return route.success;
  if (caller === 'wrong') return 401;
  if (caller === 'admin' || route.name === 'GET /dashboard') return route.success;
  const guarded = [
    'POST /skus',
    'PATCH /skus/{sku}',
    'PUT /skus/{sku}/segments',
    'POST /skus/{sku}/restock',
    'PUT /skus/{sku}/line',
    'GET /orders?customerId',
    'POST /orders/{id}/cancel (confirmed)',
  ];
  if (['GET /metrics', 'GET /dashboard/skus', 'GET /dashboard/events'].includes(route.name)) {
    return caller === 'metrics' ? route.success : 401;
  }
  // METRICS_TOKEN reads the event feed too; webhooks are ADMIN_TOKEN's alone.
  if (route.name.startsWith('GET /events')) return caller === 'metrics' ? route.success : 401;
  if (route.name.includes('/webhooks')) return caller === 'none' ? 401 : 403;
  if (guarded.includes(route.name)) return caller === 'none' ? 401 : 403;
  return route.success;
}

const unlinedFixture = () => ({
  orderSku: uniqueSku('mx-orders'),
  adminSku: uniqueSku('mx-admin'),
  readOrder: '',
});

/** Creates `sku` with a line whose sale opens tomorrow, joins OWNER to it; answers OWNER's ticket. */
async function linedSku(
  sku: string,
  as: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: { ticketId?: string } }>,
): Promise<string> {
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
  expect((await as('POST', '/skus', { sku, stock: 10, segments: 1, saleStartsAt: tomorrow })).status).toBe(201);
  expect((await as('PUT', `/skus/${sku}/line`, LINE_SETTINGS)).status).toBe(200);
  const joined = await as('POST', `/skus/${sku}/line`, { customerId: OWNER, quantity: 1 });
  expect(joined.status).toBe(201);
  return joined.body.ticketId!;
}

/** One request; an event stream is read up to its headers and then dropped. */
async function send(base: string, request: { method: string; path: string; body?: unknown }, headers = {}) {
  const stream = /^\/(dashboard\/events|events\/stream|line-tickets\/[^/]+\/stream)/.test(request.path);
  if (stream) {
    const controller = new AbortController();
    const response = await fetch(base + request.path, { headers, signal: controller.signal });
    const status = response.status;
    const wwwAuthenticate = response.headers.get('www-authenticate');
    const body = status === 200 ? undefined : await response.json();
    controller.abort();
    return { status, wwwAuthenticate, body };
  }
  const answer = await call(base, request.method, request.path, request.body, headers);
  return { status: answer.status, wwwAuthenticate: answer.headers.get('www-authenticate'), body: answer.body };
}

describe('who may do what, once service keys and a customer issuer are configured', () => {
  let issuer: TestIssuer;
  let svc: RunningService;
  let fixture: Fixture;
  const keys = new Map<Scope, ServiceKey>(SINGLE_SCOPES.map((scope) => [scope, serviceKey(`only-${scope}`, [scope])]));
  const ops = serviceKey('ops', [...SINGLE_SCOPES]);
  const credentials = new Map<string, Record<string, string>>();

  const asOps = (method: string, path: string, body?: unknown) => call(svc.url, method, path, body, bearer(ops.key));
  const newOrder = async (status: 'reserved' | 'confirmed') => {
    const placed = await asOps('POST', '/orders', {
      sku: fixture.orderSku,
      quantity: 1,
      customerId: OWNER,
      ...(status === 'reserved' && { holdSeconds: 3600 }),
    });
    expect(placed.status).toBe(201);
    return placed.body.orderId as string;
  };
  /** What a refused request must leave as it was. */
  const snapshot = async (order: string | undefined) => {
    // Read at once: with every route × caller, one after the other would take most of the test's time.
    const body = async (path: string) => (await asOps('GET', path)).body;
    const [orderSku, adminSku, adminView, ordered, line, ticket] = await Promise.all([
      auditSku(svc.service.db, fixture.orderSku),
      auditSku(svc.service.db, fixture.adminSku),
      body(`/skus/${fixture.adminSku}`),
      order && body(`/orders/${order}`),
      body(`/skus/${fixture.lineSku}/line`),
      body(`/line-tickets/${fixture.ticket}`),
    ]);
    return { orderSku, adminSku, adminView, order: ordered, line, ticket };
  };

  beforeAll(async () => {
    issuer = await TestIssuer.start();
    svc = await startService({
      API_KEYS_FILE: writeKeysFile([...keys.values(), ops]),
      ...issuer.env(),
      LOCK_WAIT_MS: '10000',
      // POST /webhooks registers a loopback URL (port 9, where nothing listens).
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    });
    fixture = { ...unlinedFixture(), lineSku: uniqueSku('mx-line'), ticket: '' };
    expect((await asOps('POST', '/skus', { sku: fixture.orderSku, stock: 10_000, segments: 4 })).status).toBe(201);
    expect((await asOps('POST', '/skus', { sku: fixture.adminSku, stock: 100, segments: 2 })).status).toBe(201);
    fixture.readOrder = await newOrder('reserved');
    fixture.ticket = await linedSku(fixture.lineSku, asOps);
    credentials.set('none', {});
    for (const [scope, key] of keys) credentials.set(scope, bearer(key.key));
    credentials.set('owner', bearer(await issuer.token(OWNER)));
    credentials.set('other', bearer(await issuer.token(OTHER)));
    const hourAgo = Math.floor(Date.now() / 1000) - 3600;
    credentials.set('expired', bearer(await issuer.token(OWNER, { iat: hourAgo - 60, exp: hourAgo })));
  });
  afterAll(async () => {
    await svc?.stop();
    await issuer?.stop();
  });

  const callers: Caller[] = [
    { kind: 'none' },
    ...SINGLE_SCOPES.map((scope) => ({ kind: 'scope', scope }) as const),
    { kind: 'owner' },
    { kind: 'other' },
    { kind: 'expired' },
  ];

  /** Every route of `cases` as every caller: the answer each gets, and that a refusal changed nothing. */
  async function checkMatrix(cases: RouteCase[]): Promise<void> {
    const mismatches: string[] = [];
    let checked = 0;
    for (const route of cases) {
      for (const caller of callers) {
        const order = route.target && (await newOrder(route.target));
        const expected = expectedClosed(route, caller);
        const before = expected >= 400 ? await snapshot(order) : undefined;
        const answer = await send(svc.url, route.request(fixture, order), credentials.get(callerName(caller)));
        checked++;
        const label = `${route.name} as ${callerName(caller)}`;
        if (answer.status !== expected) {
          mismatches.push(`${label}: ${answer.status} (expected ${expected}) ${JSON.stringify(answer.body)}`);
          continue;
        }
        if (expected === 401) {
          const challenge = caller.kind === 'expired' ? 'Bearer error="invalid_token"' : 'Bearer';
          if (answer.wwwAuthenticate !== challenge)
            mismatches.push(`${label}: WWW-Authenticate ${answer.wwwAuthenticate}`);
        }
        if (expected === 403 && answer.body?.code !== 'forbidden') mismatches.push(`${label}: ${answer.body?.code}`);
        if (expected === 403 && !answer.body?.scope) mismatches.push(`${label}: no scope named`);
        if (expected >= 400) {
          const after = await snapshot(order);
          if (JSON.stringify(after) !== JSON.stringify(before))
            mismatches.push(`${label}: a refused request changed state`);
        }
      }
    }
    expect(checked).toBe(cases.length * callers.length);
    expect(mismatches).toEqual([]);
    expect(booksViolations(await auditSku(svc.service.db, fixture.orderSku))).toEqual([]);
    expect(booksViolations(await auditSku(svc.service.db, fixture.adminSku))).toEqual([]);
  }

  it(`answers each of ${routes.length} routes × ${callers.length} callers exactly, and refusals change nothing`, () =>
    checkMatrix(routes));

  it(`answers each of the ${lineRoutes.length} line routes × ${callers.length} callers exactly, and refusals change nothing`, () =>
    checkMatrix(lineRoutes));

  it("answers a customer token another customer's order exactly as an unknown id", async () => {
    const other = credentials.get('other')!;
    const unknown = '00000000-0000-4000-8000-000000000000';
    for (const [method, suffix] of [
      ['GET', ''],
      ['POST', '/confirm'],
      ['POST', '/cancel'],
    ] as const) {
      const theirs = await call(svc.url, method, `/orders/${fixture.readOrder}${suffix}`, undefined, other);
      const none = await call(svc.url, method, `/orders/${unknown}${suffix}`, undefined, other);
      expect(theirs.status).toBe(404);
      expect({ ...theirs.body, detail: theirs.body.detail.replace(fixture.readOrder, '<id>') }).toEqual({
        ...none.body,
        detail: none.body.detail.replace(unknown, '<id>'),
      });
    }
  });

  it('places for the token’s customer without a customerId, and lists that customer’s orders only', async () => {
    const owner = credentials.get('owner')!;
    const placed = await call(svc.url, 'POST', '/orders', { sku: fixture.orderSku, quantity: 1 }, owner);
    expect(placed.status).toBe(201);
    expect(placed.body.customerId).toBe(OWNER);
    const listed = await call(svc.url, 'GET', '/orders?limit=100', undefined, owner);
    expect(listed.status).toBe(200);
    expect(listed.body.orders.length).toBeGreaterThan(0);
    expect(listed.body.orders.every((o: { customerId: string }) => o.customerId === OWNER)).toBe(true);
    const theirs = await call(svc.url, 'GET', '/orders', undefined, credentials.get('other')!);
    expect(theirs.body.orders).toEqual([]);
    // A service key must say whose orders it lists.
    expect((await call(svc.url, 'GET', '/orders', undefined, credentials.get('orders:read')!)).status).toBe(400);
  });
});

describe('who may do what with only ADMIN_TOKEN and METRICS_TOKEN set', () => {
  const ADMIN_TOKEN = `mx-admin-${Math.random().toString(36).slice(2)}-0123456789`;
  const METRICS_TOKEN = `mx-metrics-${Math.random().toString(36).slice(2)}-0123456789`;
  let svc: RunningService;
  let fixture: Fixture;
  const admin = bearer(ADMIN_TOKEN);
  const headersOf: Record<SharedCaller, Record<string, string>> = {
    none: {},
    admin,
    metrics: bearer(METRICS_TOKEN),
    wrong: bearer(`${ADMIN_TOKEN}x`),
  };
  const newOrder = async (status: 'reserved' | 'confirmed') => {
    const body = {
      sku: fixture.orderSku,
      quantity: 1,
      customerId: OWNER,
      ...(status === 'reserved' && { holdSeconds: 3600 }),
    };
    const placed = await call(svc.url, 'POST', '/orders', body);
    expect(placed.status).toBe(201);
    return placed.body.orderId as string;
  };

  beforeAll(async () => {
    svc = await startService({
      ADMIN_TOKEN,
      METRICS_TOKEN,
      LOCK_WAIT_MS: '10000',
      WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: '1',
    });
    fixture = { ...unlinedFixture(), lineSku: uniqueSku('mx-line'), ticket: '' };
    for (const sku of [fixture.orderSku, fixture.adminSku]) {
      expect((await call(svc.url, 'POST', '/skus', { sku, stock: 1000, segments: 2 }, admin)).status).toBe(201);
    }
    fixture.readOrder = await newOrder('reserved');
    fixture.ticket = await linedSku(fixture.lineSku, (method, path, body) => call(svc.url, method, path, body, admin));
  });
  afterAll(() => svc?.stop());

  it('keeps placing, reading by id, confirming and cancelling a reservation open, and guards the rest', async () => {
    const mismatches: string[] = [];
    for (const route of [...routes, ...lineRoutes]) {
      for (const caller of ['none', 'admin', 'metrics', 'wrong'] as const) {
        const order = route.target && (await newOrder(route.target));
        const state = async () => ({
          books: await auditSku(svc.service.db, fixture.orderSku),
          line: (await call(svc.url, 'GET', `/skus/${fixture.lineSku}/line`, undefined, admin)).body,
        });
        const before = await state();
        const answer = await send(svc.url, route.request(fixture, order), headersOf[caller]);
        const expected = expectedShared(route, caller);
        if (answer.status !== expected) {
          mismatches.push(`${route.name} as ${caller}: ${answer.status} (expected ${expected})`);
        } else if (expected >= 400 && JSON.stringify(await state()) !== JSON.stringify(before)) {
          mismatches.push(`${route.name} as ${caller}: a refused request changed the books`);
        }
      }
    }
    expect(mismatches).toEqual([]);
    expect(booksViolations(await auditSku(svc.service.db, fixture.orderSku))).toEqual([]);
  });
});

describe('a customer cancelling while its order is confirmed', () => {
  let issuer: TestIssuer;
  let svc: RunningService;
  const ops = serviceKey('ops', [...SINGLE_SCOPES]);

  beforeAll(async () => {
    issuer = await TestIssuer.start();
    svc = await startService({ API_KEYS_FILE: writeKeysFile([ops]), ...issuer.env(), LOCK_WAIT_MS: '10000' });
  });
  afterAll(async () => {
    await svc?.stop();
    await issuer?.stop();
  });

  it('never gets both: either the confirm or the cancel wins, decided under the order’s lock', async () => {
    const sku = uniqueSku('mx-race');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 4 }, bearer(ops.key))).status).toBe(201);
    const owner = bearer(await issuer.token(OWNER));
    const outcomes = new Map<string, number>();
    for (let i = 0; i < 30; i++) {
      const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1, holdSeconds: 3600 }, owner);
      const id = placed.body.orderId as string;
      const [confirmed, cancelled] = await Promise.all([
        call(svc.url, 'POST', `/orders/${id}/confirm`, undefined, owner),
        call(svc.url, 'POST', `/orders/${id}/cancel`, undefined, owner),
      ]);
      const final = (await call(svc.url, 'GET', `/orders/${id}`, undefined, owner)).body.status;
      const outcome = `confirm ${confirmed.status}, cancel ${cancelled.status}, ${final}`;
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
    // Confirm first: the cancel finds it confirmed (403). Cancel first: the confirm finds it cancelled (409).
    for (const outcome of outcomes.keys()) {
      expect(['confirm 200, cancel 403, confirmed', 'confirm 409, cancel 200, cancelled']).toContain(outcome);
    }
    expect(booksViolations(await auditSku(svc.service.db, sku))).toEqual([]);
    const view = (await call(svc.url, 'GET', `/skus/${sku}`, undefined, owner)).body;
    expect(view.sold + view.available).toBe(100);
  });

  it('lets the customer cancel its confirmed order where CUSTOMER_CANCEL_CONFIRMED allows it', async () => {
    const lenient = await startService({
      API_KEYS_FILE: writeKeysFile([ops]),
      ...issuer.env(),
      CUSTOMER_CANCEL_CONFIRMED: '1',
    });
    try {
      const sku = uniqueSku('mx-refund');
      expect((await call(lenient.url, 'POST', '/skus', { sku, stock: 5, segments: 1 }, bearer(ops.key))).status).toBe(
        201,
      );
      const owner = bearer(await issuer.token(OWNER));
      const placed = await call(lenient.url, 'POST', '/orders', { sku, quantity: 2 }, owner);
      expect(placed.body.status).toBe('confirmed');
      const cancelled = await call(lenient.url, 'POST', `/orders/${placed.body.orderId}/cancel`, undefined, owner);
      expect(cancelled.status).toBe(200);
      expect(cancelled.body.status).toBe('cancelled');
      expect((await call(lenient.url, 'GET', `/skus/${sku}`, undefined, owner)).body.available).toBe(5);
    } finally {
      await lenient.stop();
    }
  });
});

describe('customer tokens while the issuer’s key set cannot be fetched', () => {
  it('answers them 503 dependency_unavailable, and service keys keep working', async () => {
    const issuer = await TestIssuer.start();
    const token = await issuer.token(OWNER);
    const jwksUrl = issuer.jwksUrl;
    await issuer.stop(); // nothing listens there any more
    const ops = serviceKey('ops', ['orders:read']);
    const svc = await startService({
      API_KEYS_FILE: writeKeysFile([ops]),
      ...issuer.env(),
      CUSTOMER_JWKS_URL: jwksUrl,
    });
    try {
      const answer = await call(svc.url, 'GET', '/orders', undefined, bearer(token));
      expect(answer.status).toBe(503);
      expect(answer.body.code).toBe('dependency_unavailable');
      expect(answer.headers.get('retry-after')).toBe('1');
      expect((await call(svc.url, 'GET', `/orders?customerId=${OWNER}`, undefined, bearer(ops.key))).status).toBe(200);
    } finally {
      await svc.stop();
    }
  });
});
