import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { RedisServer } from '../../src/dev/servers/index.js';
import { auditSku } from '../support/invariants.js';
import { segmentLocksProcess } from '../support/segment-locks.js';
import {
  call,
  type RunningService,
  ServiceProcess,
  startService,
  testEndpoints,
  uniqueSku,
} from '../support/service.js';

const ADMIN_TOKEN = `sec-admin-${randomBytes(12).toString('hex')}`;
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const HTML_OR_LEGACY_HEADERS = [
  'cross-origin-opener-policy',
  'origin-agent-cluster',
  'x-dns-prefetch-control',
  'x-download-options',
  'x-permitted-cross-domain-policies',
  'x-xss-protection',
];

describe('security headers', () => {
  let svc: RunningService;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN });
  });
  afterAll(() => svc.stop());

  it('are on every answer: successes, problems and unknown routes alike', async () => {
    for (const [method, path] of [
      ['GET', '/healthz'],
      ['GET', '/skus/no-such-sku'],
      ['POST', '/orders'],
      ['GET', '/nowhere'],
    ] as const) {
      const answer = await call(svc.url, method, path);
      const h = answer.headers;
      expect(h.get('content-security-policy'), path).toContain("default-src 'none'");
      expect(h.get('content-security-policy'), path).toContain("frame-ancestors 'none'");
      expect(h.get('x-frame-options'), path).toBe('DENY');
      expect(h.get('x-content-type-options'), path).toBe('nosniff');
      expect(h.get('referrer-policy'), path).toBe('no-referrer');
      expect(h.get('strict-transport-security'), path).toMatch(/max-age=\d+/);
      expect(h.get('cross-origin-resource-policy'), path).toBe('same-origin');
      expect(h.get('x-powered-by'), path).toBeNull();
      // Headers for HTML documents or for browsers long gone: a JSON answer does not pay for them.
      for (const name of HTML_OR_LEGACY_HEADERS) expect(h.get(name), `${path} ${name}`).toBeNull();
    }
  });

  it('on the two HTML pages and their files: a policy of their own, and the headers that protect a document', async () => {
    for (const path of ['/docs', '/docs/ui/swagger-ui.css', '/dashboard']) {
      const answer = await call(svc.url, 'GET', path);
      expect(answer.status, path).toBe(200);
      const h = answer.headers;
      expect(h.get('content-security-policy'), path).toContain("script-src 'self'");
      expect(h.get('content-security-policy'), path).toContain("frame-ancestors 'none'");
      expect(h.get('cross-origin-opener-policy'), path).toBe('same-origin');
      expect(h.get('origin-agent-cluster'), path).toBe('?1');
      expect(h.get('x-frame-options'), path).toBe('DENY');
      expect(h.get('x-content-type-options'), path).toBe('nosniff');
    }
  });
});

describe('admin routes and the order route', () => {
  let svc: RunningService;
  let sku: string;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN });
    sku = uniqueSku('sec');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 40, segments: 4 }, admin)).status).toBe(201);
  });
  afterAll(() => svc.stop());

  it('refuse every admin change without the right token (401 missing or wrong), and change nothing', async () => {
    const before = await auditSku(svc.service.db, sku);
    const changes = [
      ['POST', '/skus', { sku: uniqueSku('sec'), stock: 10, segments: 2 }],
      ['PUT', `/skus/${sku}/segments`, { segments: 8 }],
      ['POST', `/skus/${sku}/restock`, { quantity: 1000 }],
    ] as const;
    for (const [method, path, body] of changes) {
      expect((await call(svc.url, method, path, body)).status).toBe(401);
      expect((await call(svc.url, method, path, body, { authorization: `Bearer ${ADMIN_TOKEN}x` })).status).toBe(401);
      expect((await call(svc.url, method, path, body, { authorization: `Basic ${ADMIN_TOKEN}` })).status).toBe(401);
      expect((await call(svc.url, method, path, body, { 'x-admin-token': ADMIN_TOKEN })).status).toBe(401);
    }
    expect(await auditSku(svc.service.db, sku)).toEqual(before);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body.segments).toBe(4);
  });

  it('lets the order route change no SKU configuration, whatever fields it is sent', async () => {
    const before = await auditSku(svc.service.db, sku);
    for (const extra of [{ segments: 1 }, { stock: 1_000_000 }, { available: 999 }, { restock: 5 }]) {
      const answer = await call(svc.url, 'POST', '/orders', { sku, quantity: 1, ...extra }, admin);
      expect(answer.status).toBe(400);
      expect(answer.body.code).toBe('bad_request');
    }
    expect(await auditSku(svc.service.db, sku)).toEqual(before);
    expect((await call(svc.url, 'GET', `/skus/${sku}`)).body.segments).toBe(4);
  });
});

describe('per-client rate limit on order placement', () => {
  it('is off by default: a burst of orders from one client is never limited', async () => {
    const svc = await startService();
    try {
      const sku = uniqueSku('rl-off');
      await call(svc.url, 'POST', '/skus', { sku, stock: 1000, segments: 4 });
      const statuses = await Promise.all(
        Array.from({ length: 60 }, () => call(svc.url, 'POST', '/orders', { sku, quantity: 1 })),
      );
      expect(statuses.map((a) => a.status).filter((s) => s === 429)).toEqual([]);
      expect(statuses[0]!.headers.get('ratelimit')).toBeNull();
    } finally {
      await svc.stop();
    }
  });

  it('when configured, answers 429 with Retry-After once a client exceeds it, counting only POST /orders', async () => {
    // The counts live in the Redis all tests share: a client address of its own keeps them apart.
    const svc = await startService({ RATE_LIMIT_ORDERS_PER_MINUTE: '5', TRUST_PROXY_HOPS: '1' });
    const client = {
      'x-forwarded-for': `10.77.${Math.floor(Math.random() * 256)}.${1 + Math.floor(Math.random() * 254)}`,
    };
    try {
      const sku = uniqueSku('rl-on');
      await call(svc.url, 'POST', '/skus', { sku, stock: 1000, segments: 4 });
      for (let i = 0; i < 5; i++) {
        const placed = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 }, client);
        expect(placed.status).toBe(201);
        expect(placed.headers.get('ratelimit-policy')).toMatch(/q=5/);
      }
      const limited = await call(svc.url, 'POST', '/orders', { sku, quantity: 1 }, client);
      expect(limited.status).toBe(429);
      expect(limited.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(limited.body).toMatchObject({ status: 429, code: 'rate_limited', title: expect.any(String) });
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      // Reading is not limited, nor is the rest of the API.
      expect((await call(svc.url, 'GET', `/skus/${sku}`)).status).toBe(200);
      expect((await call(svc.url, 'POST', `/skus/${sku}/restock`, { quantity: 1 })).status).toBe(200);
      // The refused order was not placed.
      expect((await auditSku(svc.service.db, sku)).sold).toBe(5);
    } finally {
      await svc.stop();
    }
  });
});

describe('secrets and internals', () => {
  const password = `pw-${randomBytes(12).toString('hex')}`;
  const role = `sec_${randomBytes(4).toString('hex')}`;
  let db: Db;
  let redis: RedisServer;
  let secretDatabaseUrl: string;

  beforeAll(async () => {
    const { databaseUrl } = testEndpoints();
    db = createDatabase(databaseUrl, 1);
    // A role of its own, so the password in the service's DATABASE_URL is one no other test or log could contain.
    await sql`create role ${sql.id(role)} login password ${sql.lit(password)}`.execute(db);
    await sql`grant select, insert, update, delete on all tables in schema public to ${sql.id(role)}`.execute(db);
    await sql`grant usage on all sequences in schema public to ${sql.id(role)}`.execute(db);
    const url = new URL(databaseUrl);
    url.username = role;
    url.password = password;
    secretDatabaseUrl = url.toString();
    // The test takes it away mid-request: `stop()` is a SIGKILL.
    redis = await RedisServer.start({ stopMode: 'immediate' });
  });
  afterAll(async () => {
    await redis?.destroy();
    await sql`drop owned by ${sql.id(role)}`.execute(db).catch(() => {});
    await sql`drop role if exists ${sql.id(role)}`.execute(db).catch(() => {});
    await db?.destroy();
  });

  it('never logs the admin token or the database password, nor puts internals in answers, even when Redis is gone', async () => {
    const service = await ServiceProcess.spawn({
      REDIS_URL: redis.url,
      DATABASE_URL: secretDatabaseUrl,
      ADMIN_TOKEN,
      LOG_LEVEL: 'trace',
    });
    try {
      const sku = uniqueSku('sec-log');
      expect((await call(service.url, 'POST', '/skus', { sku, stock: 10, segments: 2 }, admin)).status).toBe(201);
      expect(
        (
          await call(
            service.url,
            'POST',
            '/skus',
            { sku: 'x', stock: 1, segments: 1 },
            { authorization: 'Bearer wrong-token-123' },
          )
        ).status,
      ).toBe(401);
      await redis.stop();
      const answers = [
        await call(service.url, 'POST', '/orders', { sku, quantity: 1 }, admin),
        await call(
          service.url,
          'POST',
          '/orders',
          { sku, quantity: 2 },
          { ...admin, 'idempotency-key': uniqueSku('key') },
        ),
        await call(service.url, 'GET', '/readyz', undefined, admin),
      ];
      for (const answer of answers) {
        expect(answer.status).toBe(503);
        expect(answer.body.code).toBe('dependency_unavailable');
        expect(JSON.stringify(answer.body)).not.toMatch(/ECONNREFUSED|writeable|ioredis|127\.0\.0\.1|\bat .*\.js:\d+/);
      }
    } finally {
      await service.stop();
      await redis.resume();
    }
    const log = service.output.join('\n');
    // The failures above were logged, with the route they failed on, and the secrets were not.
    expect(log).toMatch(/"level":40.*"url":"\/orders".*"msg":"dependency unavailable"/);
    expect(log).not.toContain(ADMIN_TOKEN);
    expect(log).not.toContain(password);
  });

  it('names an invalid variable at start without echoing its value', async () => {
    const failed = ServiceProcess.spawn({ DATABASE_URL: `mysql://admin:${password}@127.0.0.1/stock`, ADMIN_TOKEN });
    const error = await failed.then(
      () => undefined,
      (e: Error) => e.message,
    );
    expect(error).toContain('DATABASE_URL');
    expect(error).not.toContain(password);
  });
});

describe('the failure log (there is no per-request log: a failure is logged where it is handled)', () => {
  it('logs a request that failed on Redis, with its method and path, but not the 503s that shed load when a SKU stays busy', async () => {
    // A Redis of its own, which the test takes away at the end.
    const redis = await RedisServer.start({ stopMode: 'immediate' });
    const service = await ServiceProcess.spawn({ REDIS_URL: redis.url, LOCK_WAIT_MS: '50', LOG_LEVEL: 'info' });
    const holder = segmentLocksProcess(redis.url, { ttlMs: 10_000 });
    try {
      const sku = uniqueSku('log-busy');
      expect((await call(service.url, 'POST', '/skus', { sku, stock: 10, segments: 1 })).status).toBe(201);
      // Another process holds the SKU's only segment: every order waits out its 50 ms and is turned away.
      const lease = (await holder.tryAcquire({ sku, layoutVersion: 1, segment: 0 }))!;
      const answers = await Promise.all(
        Array.from({ length: 5 }, () => call(service.url, 'POST', '/orders', { sku, quantity: 1 })),
      );
      expect(answers.map((a) => `${a.status} ${a.body.code}`)).toEqual(Array(5).fill('503 lock_busy'));
      await holder.release(lease);
      await holder.close();
      // Then a failure: Redis is gone, and the order cannot be placed.
      await redis.stop();
      const failed = await call(service.url, 'POST', '/orders', { sku, quantity: 1 });
      expect(failed.body.code).toBe('dependency_unavailable');
    } finally {
      await holder.close().catch(() => {});
      await service.stop();
      await redis.destroy();
    }
    const lines = service.output.filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
    const aboutOrders = lines.filter((line) => line.url === '/orders');
    // The failure was logged, at warn, with its method and path…
    expect(aboutOrders.filter((line) => line.msg === 'dependency unavailable')).toMatchObject([
      { level: 40, method: 'POST', url: '/orders' },
    ]);
    // …and it is the only line about an order: the five lock_busy 503s left none, at any level.
    expect(aboutOrders).toHaveLength(1);
    expect(service.output.join('\n')).not.toMatch(/lock_busy|busy past/);
  });
});
