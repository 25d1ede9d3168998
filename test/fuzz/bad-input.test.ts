import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/database.js';
import { errorCatalog } from '../../src/errors.js';
import { cartOrderBody, createSkuBody, resegmentBody, restockBody, singleOrderBody } from '../../src/http/schemas.js';
import { createOwnDatabase, type OwnDatabase } from '../support/own-database.js';
import { rawRequest } from '../support/raw-http.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';
import { databaseFingerprint, redisChanges, redisFingerprint } from '../support/state-fingerprint.js';

/**
 * Property-based bad input for every route: random and hostile bodies, headers, paths and query strings, sent to a
 * real service process. Whatever arrives, the answer is a 4xx (never a 5xx), errors are problem documents that
 * reveal no internals, Postgres and Redis are left exactly as they were, and the process stays up.
 * FUZZ_SEED=<n> replays a run; a failure prints its seed and the shrunk request.
 */

const ADMIN_TOKEN = `fuzz-admin-${randomBytes(12).toString('hex')}`;
const MAX_ORDER_QUANTITY = 50;
const seed = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
/**
 * Each property runs a fixed number of cases, however long a slow machine takes for them; the tests' 900 s timeouts
 * only guard against a hang, far beyond what the cases take on a slow, shared machine.
 */
const budget = (numRuns: number) => ({
  numRuns,
  ...(seed !== undefined && { seed }),
});

/** Known stack-frame, path and database-error shapes; an error body carrying any of them leaks internals. */
const INTERNALS =
  /\bat .*\.(?:ts|js|mjs):\d+|node_modules|\/work\/|\/src\/|syntax error at or near|violates .* constraint|relation "|duplicate key|ECONNREFUSED|Kysely|TypeError|ReferenceError/i;
const KNOWN_CODES = new Set(Object.keys(errorCatalog));

interface Answer {
  status: number;
  contentType: string;
  body: string;
}

let sent = 0;

/**
 * A rejected request: a 4xx, and when the service wrote a body, a problem document without internals. Requests the
 * HTTP parser refuses (control characters in a header, oversized headers) never reach the service and get Node's
 * bare 400 or 431; `allowed` constrains only the service's own answers.
 */
function expectRejected(answer: Answer, request: unknown, allowed?: number[]): void {
  const context = `${JSON.stringify(request).slice(0, 500)} → ${answer.status} ${answer.body.slice(0, 300)}`;
  expect(answer.status, context).toBeGreaterThanOrEqual(400);
  expect(answer.status, context).toBeLessThan(500);
  expect(answer.body, context).not.toMatch(INTERNALS);
  if (!answer.contentType.startsWith('application/problem+json')) {
    expect([400, 413, 431], context).toContain(answer.status);
    return;
  }
  if (allowed) expect(allowed, context).toContain(answer.status);
  if (answer.body === '') return; // HEAD
  const problem = JSON.parse(answer.body) as { status: number; code: string; title: string; detail: string };
  expect(problem.status, context).toBe(answer.status);
  expect(KNOWN_CODES.has(problem.code), context).toBe(true);
  expect(typeof problem.title === 'string' && typeof problem.detail === 'string', context).toBe(true);
}

function tryParseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Path segments as a client would encode them; lone surrogates cannot be encoded and are sent raw instead. */
function encodeSegment(value: string): string {
  try {
    return encodeURIComponent(value);
  } catch {
    return 'bad%ZZsurrogate';
  }
}

/** Printable Latin-1: every value fetch is willing to put in a header. */
const headerText = (maxLength: number) =>
  fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength });

const nastyString = fc.oneof(
  fc.string({ maxLength: 70 }),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.stringMatching(/^[A-Za-z0-9._:-]{65,80}$/),
  fc.constantFrom(
    "'; drop table orders; --",
    "1' or '1'='1",
    '" or ""="',
    '$1',
    '\\',
    '%',
    '%00',
    '\u0000',
    '\u202e',
    '\ufeff',
    '__proto__',
    'constructor',
    'prototype',
    'NaN',
    'Infinity',
    '-1',
    '1e309',
    '../../etc/passwd',
    '{sku}',
    'lock:{stock/*',
    '*',
    '',
    ' ',
    'null',
  ),
);

const nastyNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(
    0,
    -1,
    0.5,
    1.5,
    MAX_ORDER_QUANTITY + 1,
    1025,
    1e12 + 1,
    2 ** 53,
    2 ** 53 + 2,
    -(2 ** 63),
    1e308,
    Number.MIN_VALUE,
  ),
);

const anyValue = fc.oneof(
  nastyString,
  nastyNumber,
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(nastyString, fc.integer(), { maxKeys: 3 }),
);

/** A JSON object text with one extra member under `key`, which may be `__proto__` (JSON.stringify would drop it). */
const withMember = (base: Record<string, unknown>, key: string, value: unknown) =>
  `${JSON.stringify(base).slice(0, -1)},${JSON.stringify(key)}:${JSON.stringify(value ?? null)}}`;

/** Bodies whose shape or values are wrong, for a route whose valid body is `valid`. */
function hostileBodies(
  valid: Record<string, unknown>,
  fields: Record<string, fc.Arbitrary<unknown>>,
): fc.Arbitrary<string> {
  const validText = JSON.stringify(valid);
  return fc.oneof(
    { weight: 4, arbitrary: fc.record(fields, { requiredKeys: [] }).map((body) => JSON.stringify(body)) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.constantFrom('__proto__', 'constructor', 'segments', 'stock', 'sku ', 'Quantity', 'quantity\u0000'),
          anyValue,
        )
        .map(([key, value]) => withMember(valid, key, value)),
    },
    { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        validText.replace(/\d+(?=[,}])/, '1e400'),
        validText.replace(/\d+(?=[,}])/, 'NaN'),
        validText.replace(/\d+(?=[,}])/, '"1"'),
        validText.replace(/\d+(?=[,}])/, '-1'),
        validText.replace(/\d+(?=[,}])/, '0x10'),
        validText.replace(/}$/, ',}'),
        validText.slice(0, -1),
        `[${validText}]`,
        `{"__proto__":${validText}}`,
        `{"constructor":{"prototype":${validText}}}`,
        'null',
        '"text"',
        '0',
        '',
        ' ',
        '\u0000',
      ),
    },
    // Over the 16 KiB limit.
    {
      weight: 1,
      arbitrary: fc.integer({ min: 16 * 1024, max: 48 * 1024 }).map((n) => withMember(valid, 'pad', 'x'.repeat(n))),
    },
  );
}

const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/json; charset=utf-16',
      'application/json; charset=latin1',
      'application/xml',
      'application/merge-patch+json',
      '*/*',
      'APPLICATION/JSON',
      'application/jsonx',
    ),
  },
  { weight: 1, arbitrary: headerText(40) },
  { weight: 1, arbitrary: fc.constant(undefined) },
);

const idempotencyKeyHeader = fc.option(
  fc.oneof(
    fc.stringMatching(/^[\x21-\x7e]{1,128}$/),
    fc.constantFrom('', ' ', 'x'.repeat(129), 'has space', 'tab\there', 'ümlaut', '"quoted"'),
    headerText(140),
  ),
  { nil: undefined },
);

describe('fuzzed input: only 4xx, nothing changed, the process stays up', () => {
  let service: ServiceProcess;
  let port: number;
  let own: OwnDatabase;
  let db: Db;
  let redis: Redis;
  let target: string;
  let before: { database: Record<string, string>; redis: Map<string, string> };

  /** Over a kept-alive connection with fetch; over a raw one for the header values fetch refuses to send. */
  const send = async (
    method: string,
    path: string,
    headers: Record<string, string | undefined>,
    body?: string,
  ): Promise<Answer> => {
    sent++;
    const defined = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<
      string,
      string
    >;
    try {
      const response = await fetch(`${service.url}${path}`, {
        method,
        headers: defined,
        body,
        signal: AbortSignal.timeout(10_000),
      });
      return {
        status: response.status,
        contentType: response.headers.get('content-type') ?? '',
        body: await response.text(),
      };
    } catch (error) {
      if ((error as { cause?: { code?: string } }).cause?.code !== 'UND_ERR_INVALID_ARG') throw error;
    }
    const bytes = Buffer.from(body ?? '', 'utf8');
    const head = [
      `${method} ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      'Connection: close',
      ...Object.entries(defined).map(([name, value]) => `${name}: ${value}`),
      `Content-Length: ${bytes.length}`,
    ].join('\r\n');
    const answer = await rawRequest(port, Buffer.concat([Buffer.from(`${head}\r\n\r\n`, 'latin1'), bytes]));
    return { status: answer.status, contentType: answer.headers['content-type'] ?? '', body: answer.body };
  };
  const authorized = (header: string | undefined) => /^Bearer +(\S+)\s*$/i.exec(header ?? '')?.[1] === ADMIN_TOKEN;
  const adminHeader = fc.oneof(
    { weight: 3, arbitrary: fc.constant(`Bearer ${ADMIN_TOKEN}`) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        `Bearer ${ADMIN_TOKEN}x`,
        `Bearer ${ADMIN_TOKEN.slice(0, -1)}`,
        `Bearer ${ADMIN_TOKEN.toUpperCase()}`,
        `Bearer ${ADMIN_TOKEN} extra`,
        `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString('base64')}`,
        `Token ${ADMIN_TOKEN}`,
        'Bearer',
        'Bearer null',
      ),
    },
    { weight: 1, arbitrary: headerText(60).map((t) => `Bearer ${t}`) },
    { weight: 1, arbitrary: headerText(60) },
  );

  beforeAll(async () => {
    // A database of its own, so that "nothing changed" is exact: on the shared one, reservations earlier test files
    // left expire, and waiting lines they left admit tickets, while this file runs.
    own = await createOwnDatabase('fuzz_input');
    expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
    db = own.db;
    const env = { ADMIN_TOKEN, MAX_ORDER_QUANTITY: String(MAX_ORDER_QUANTITY), DATABASE_URL: own.url };
    service = await ServiceProcess.spawn(env);
    port = Number(new URL(service.url).port);
    redis = new Redis(testEndpoints().redisUrl);
    target = uniqueSku('fuzz');
    const created = await call(
      service.url,
      'POST',
      '/skus',
      { sku: target, stock: 100, segments: 4 },
      { authorization: `Bearer ${ADMIN_TOKEN}` },
    );
    expect(created.status).toBe(201);
  });
  afterAll(async () => {
    await service?.stop();
    redis?.disconnect();
    await own?.drop();
  });

  const snapshot = async () => ({ database: await databaseFingerprint(db), redis: await redisFingerprint(redis) });
  const expectUnchanged = async () => {
    const after = await snapshot();
    expect(after.database).toEqual(before.database);
    expect(redisChanges(before.redis, after.redis)).toEqual([]);
    expect(service.child.exitCode).toBeNull();
  };

  it('POST /orders: hostile bodies, content types and Idempotency-Keys', async () => {
    before = await snapshot();
    const request = fc
      .record({
        body: hostileBodies(
          { sku: target, quantity: 1 },
          { sku: fc.oneof(fc.constant(target), nastyString, anyValue), quantity: fc.oneof(nastyNumber, anyValue) },
        ),
        contentType,
        idempotencyKey: idempotencyKeyHeader,
      })
      // A body the service would accept places an order: not bad input.
      .filter(({ body }) => !isOrderBody(tryParseJson(body)));
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const answer = await send(
          'POST',
          '/orders',
          { 'content-type': r.contentType, 'idempotency-key': r.idempotencyKey },
          r.body,
        );
        expectRejected(answer, r);
      }),
      budget(3_500),
    );
    await expectUnchanged();
  }, 900_000);

  it('POST /skus: refused without the right admin token, invalid bodies refused with it', async () => {
    before = await snapshot();
    const request = fc
      .record({
        authorization: adminHeader,
        body: hostileBodies(
          { sku: uniqueSku('never'), stock: 10, segments: 2 },
          {
            sku: fc.oneof(nastyString, anyValue),
            stock: fc.oneof(nastyNumber, anyValue),
            segments: fc.oneof(nastyNumber, anyValue),
          },
        ),
        contentType,
      })
      .filter(
        ({ authorization, body }) =>
          !(authorized(authorization) && createSkuBody.safeParse(tryParseJson(body)).success),
      );
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const answer = await send(
          'POST',
          '/skus',
          { 'content-type': r.contentType, authorization: r.authorization },
          r.body,
        );
        // No bearer credential (401 unauthorized) or one that is not the token (401 invalid_token).
        if (!authorized(r.authorization)) expectRejected(answer, r, [401]);
        else expectRejected(answer, r);
      }),
      budget(1_500),
    );
    await expectUnchanged();
  }, 900_000);

  it('PUT /skus/:sku/segments and POST /skus/:sku/restock: hostile SKUs, bodies and tokens', async () => {
    before = await snapshot();
    const request = fc
      .record({
        route: fc.constantFrom('segments', 'restock'),
        sku: fc.oneof({ weight: 3, arbitrary: fc.constant(target) }, { weight: 2, arbitrary: nastyString }),
        authorization: adminHeader,
        segmentsBody: hostileBodies({ segments: 8 }, { segments: fc.oneof(nastyNumber, anyValue) }),
        restockBody: hostileBodies({ quantity: 5 }, { quantity: fc.oneof(nastyNumber, anyValue) }),
        contentType,
      })
      .map(({ route, segmentsBody, restockBody: restock, ...rest }) => ({
        ...rest,
        route,
        body: route === 'segments' ? segmentsBody : restock,
      }))
      .filter(({ route, sku, authorization, body }) => {
        const schema = route === 'segments' ? resegmentBody : restockBody;
        return !(authorized(authorization) && sku === target && schema.safeParse(tryParseJson(body)).success);
      });
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const method = r.route === 'segments' ? 'PUT' : 'POST';
        const path = `/skus/${encodeSegment(r.sku)}/${r.route}`;
        const answer = await send(
          method,
          path,
          { 'content-type': r.contentType, authorization: r.authorization },
          r.body,
        );
        // Without the right token nothing gets past the token check, except a path that resolves to another route
        // ('.' and '..' segments) or to none.
        expectRejected(answer, r, authorized(r.authorization) ? undefined : [401, 404, 405]);
      }),
      budget(2_000),
    );
    await expectUnchanged();
  }, 900_000);

  it('every route: hostile paths, methods and query strings', async () => {
    before = await snapshot();
    const path = fc.oneof(
      nastyString.map((s) => `/skus/${encodeSegment(s)}`),
      nastyString.map((s) => `/orders/${encodeSegment(s)}`),
      fc.uuid().map((id) => `/orders/${id}`),
      nastyString.map((s) => `/${encodeSegment(s)}`),
      nastyString.map((s) => `/skus/${target}/${encodeSegment(s)}`),
      fc.constantFrom(
        '/skus',
        '/orders',
        '/healthz/x',
        '/skus/%',
        '/orders/%E0%A4%A',
        '//',
        '/skus//segments',
        `/skus/${target}`,
        '/readyz/..%2f',
        '/%2e%2e/%2e%2e/etc/passwd',
      ),
    );
    const request = fc
      .record({
        method: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD'),
        path,
        query: fc.option(
          fc.tuple(nastyString, nastyString).map(([k, v]) => `?${encodeSegment(k)}=${encodeSegment(v)}`),
          { nil: '' },
        ),
      })
      // Reading an existing SKU, or the first page of the SKU list, succeeds: not bad input. Compared as the URL
      // parser resolves it (dot segments, %2e).
      .filter(({ method, path: p, query }) => {
        const resolved = URL.canParse(p, 'http://127.0.0.1')
          ? new URL(p, 'http://127.0.0.1').pathname.replace(/\/+$/, '').toLowerCase()
          : p;
        const reads = resolved === `/skus/${target}`.toLowerCase() || (resolved === '/skus' && query === '');
        return !((method === 'GET' || method === 'HEAD') && reads);
      });
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const answer = await send(r.method, `${r.path}${r.query}`, {});
        expectRejected(answer, r);
      }),
      budget(2_000),
    );
    await expectUnchanged();
  }, 900_000);

  it('raw requests: control characters and raw bytes in paths and headers, oversized headers', async () => {
    before = await snapshot();
    const rawText = (maxLength: number) =>
      fc.uint8Array({ minLength: 1, maxLength }).map((b) => Buffer.from(b).toString('latin1'));
    const request = fc
      .record({
        method: fc.oneof(
          fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'FOO', 'G ET'),
          fc.stringMatching(/^[A-Z]{1,8}$/),
        ),
        path: fc.oneof(
          fc.constantFrom('/orders', '/skus', `/skus/${target}/restock`, `/skus/${target}/segments`),
          rawText(40).map((t) => `/${t}`),
          rawText(20).map((t) => `/skus/${t}`),
          fc.constantFrom('*', 'http://evil.example/orders', '/orders#frag', '/orders?%', '/%%%', '/skus/%ff%fe'),
        ),
        headers: fc.array(
          fc.tuple(
            fc.oneof(
              fc.constantFrom('Content-Type', 'Idempotency-Key', 'Authorization', 'X-Forwarded-For', 'Accept'),
              fc.stringMatching(/^[A-Za-z-]{1,20}$/),
              rawText(10),
            ),
            rawText(60),
          ),
          { maxLength: 4 },
        ),
        oversizedHeader: fc.boolean().chain((big) => (big ? fc.constant(Math.random() < 0.15) : fc.constant(false))),
        body: fc.oneof(
          rawText(300),
          hostileBodies({ sku: target, quantity: 1 }, { sku: anyValue, quantity: anyValue }),
        ),
      })
      // Reading the SKU list succeeds whatever body a GET carries: not bad input. The request line ends its target at
      // a space, and the router reads the path up to `?` or `#`, so `/skus/ …` and `/skus/?` are that read too.
      .filter(({ method, path: p }) => {
        const requested = p.split(/[ ?#]/)[0];
        return !((method === 'GET' || method === 'HEAD') && (requested === '/skus' || requested === '/skus/'));
      })
      .filter(({ method, body }) => method !== 'CONNECT' && !isOrderBody(tryParseJson(body)));
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const body = Buffer.from(r.body, 'utf8');
        const head = [
          `${r.method} ${r.path} HTTP/1.1`,
          'Host: 127.0.0.1',
          'Connection: close',
          ...r.headers.map(([name, value]) => `${name}: ${value}`),
          ...(r.oversizedHeader ? [`X-Pad: ${'a'.repeat(20_000)}`] : []),
          `Content-Length: ${body.length}`,
        ].join('\r\n');
        sent++;
        const answer = await rawRequest(port, Buffer.concat([Buffer.from(`${head}\r\n\r\n`, 'latin1'), body]));
        expectRejected(
          { status: answer.status, contentType: answer.headers['content-type'] ?? '', body: answer.body },
          r,
        );
      }),
      budget(1_500),
    );
    await expectUnchanged();
  }, 900_000);

  it('ran at least 10,000 cases, and the process is still up and healthy', async () => {
    console.log(`[fuzz] ${sent} requests sent`);
    expect(sent).toBeGreaterThanOrEqual(10_000);
    expect(service.child.exitCode).toBeNull();
    expect((await call(service.url, 'GET', '/healthz')).status).toBe(200);
  });
});

/** Whether the service would take this as an order: one SKU, or a cart. */
function isOrderBody(body: unknown): boolean {
  return (
    singleOrderBody(MAX_ORDER_QUANTITY).safeParse(body).success ||
    cartOrderBody(MAX_ORDER_QUANTITY).safeParse(body).success
  );
}
