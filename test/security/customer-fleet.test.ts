import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from '../support/invariants.js';
import { ServiceFleet } from '../support/service-fleet.js';
import { call, testEndpoints, uniqueSku } from '../support/service.js';
import { bearer, serviceKey, TestIssuer, writeKeysFile } from './credentials.js';

/**
 * Customer tokens across two service processes on one Redis and one Postgres: the per-customer limit and the order
 * rate limit count the token's customer wherever its orders land, and a token reaches no other customer's orders on
 * either instance.
 */
describe('customer tokens on two instances', () => {
  const RATE_LIMIT = 40;
  let issuer: TestIssuer;
  let fleet: ServiceFleet;
  let db: Db;
  let urls: string[];
  const ops = serviceKey('ops', ['stock:admin', 'orders:read']);
  /** A client address of its own per request: the limit must count the customer, not the address. */
  let address = 0;
  const from = () => ({ 'x-forwarded-for': `10.19.${Math.floor(address / 250)}.${(address++ % 250) + 1}` });

  beforeAll(async () => {
    issuer = await TestIssuer.start();
    db = createDatabase(testEndpoints().databaseUrl, 2);
    fleet = await ServiceFleet.start(2, {
      API_KEYS_FILE: writeKeysFile([ops]),
      ...issuer.env(),
      RATE_LIMIT_ORDERS_PER_MINUTE: String(RATE_LIMIT),
      TRUST_PROXY_HOPS: '1',
      // A generous wait budget: on this 2-core machine a 503 would only blur the counts.
      LOCK_WAIT_MS: '15000',
    });
    urls = fleet.members.map((member) => member.url);
  });
  afterAll(async () => {
    await fleet?.stopAll();
    await issuer?.stop();
    await db?.destroy();
  });

  it('holds a customer hammering a limited SKU from both instances to exactly its limit, then rate-limits it', async () => {
    const sku = uniqueSku('fleet-limit');
    const created = await call(
      urls[0]!,
      'POST',
      '/skus',
      { sku, stock: 100, segments: 4, maxPerCustomer: 3 },
      bearer(ops.key),
    );
    expect(created.status).toBe(201);
    const customer = `hammer-${Date.now().toString(36)}`;
    const token = bearer(await issuer.token(customer));

    // Every order names no customer: the token says who it is. Half go to each instance, all at once.
    const answers = await Promise.all(
      Array.from({ length: RATE_LIMIT }, (_, i) =>
        call(urls[i % 2]!, 'POST', '/orders', { sku, quantity: 1, holdSeconds: 3600 }, { ...token, ...from() }),
      ),
    );
    const statuses = answers.map((a) => `${a.status} ${a.body.code ?? a.body.status}`).sort();
    expect(statuses.filter((s) => s === '201 reserved')).toHaveLength(3);
    expect(statuses.filter((s) => s === '409 purchase_limit')).toHaveLength(RATE_LIMIT - 3);

    for (const url of urls) {
      const mine = await call(url, 'GET', '/orders?limit=100', undefined, token);
      expect(mine.body.orders.map((o: { customerId: string }) => o.customerId)).toEqual(Array(3).fill(customer));
      // Both instances have counted this customer's orders together, whatever address they came from.
      const limited = await call(url, 'POST', '/orders', { sku, quantity: 1 }, { ...token, ...from() });
      expect(limited.status).toBe(429);
    }
    const audit = await auditSku(db, sku);
    expect(booksViolations(audit)).toEqual([]);
    expect(audit.reserved).toBe(3);
  });

  it("keeps one customer's token away from another's orders on both instances", async () => {
    const sku = uniqueSku('fleet-own');
    expect((await call(urls[0]!, 'POST', '/skus', { sku, stock: 10, segments: 2 }, bearer(ops.key))).status).toBe(201);
    const alice = bearer(await issuer.token(`alice-${Date.now().toString(36)}`));
    const bobId = `bob-${Date.now().toString(36)}`;
    const bob = bearer(await issuer.token(bobId));
    const bobs = await call(
      urls[1]!,
      'POST',
      '/orders',
      { sku, quantity: 2, holdSeconds: 3600 },
      { ...bob, ...from() },
    );
    expect(bobs.status).toBe(201);
    const id = bobs.body.orderId as string;
    const before = await auditSku(db, sku);

    for (const url of urls) {
      expect((await call(url, 'GET', `/orders/${id}`, undefined, alice)).status).toBe(404);
      expect((await call(url, 'POST', `/orders/${id}/cancel`, undefined, alice)).status).toBe(404);
      expect((await call(url, 'POST', `/orders/${id}/confirm`, undefined, alice)).status).toBe(404);
      expect((await call(url, 'GET', `/orders?customerId=${bobId}`, undefined, alice)).status).toBe(403);
      expect((await call(url, 'GET', '/orders', undefined, alice)).body.orders).toEqual([]);
      const forBob = await call(
        url,
        'POST',
        '/orders',
        { sku, quantity: 1, customerId: bobId },
        { ...alice, ...from() },
      );
      expect(forBob.status).toBe(403);
    }
    expect(await auditSku(db, sku)).toEqual(before);
    const theirs = await call(urls[0]!, 'GET', `/orders/${id}`, undefined, bob);
    expect(theirs.body).toMatchObject({ status: 'reserved', customerId: bobId, quantity: 2 });
    // Neither a key nor a token reaches the logs (which were captured: each instance said where it listens).
    expect(fleet.logs().match(/"msg":"listening"/g)).toHaveLength(2);
    for (const secret of [ops.key, alice.authorization.slice(7), bob.authorization.slice(7)]) {
      expect(fleet.logs()).not.toContain(secret);
    }
  });
});
