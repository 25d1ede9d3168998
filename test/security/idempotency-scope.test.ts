import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku } from '../support/invariants.js';
import { createOwnDatabase } from '../support/own-database.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { bearer, serviceKey, TestIssuer, writeKeysFile } from './credentials.js';

/**
 * An Idempotency-Key belongs to the credential that sent it: the same key from two callers places two orders (or
 * applies two admin writes) and neither caller learns of the other; within one caller a repeat still replays, on
 * either of two instances.
 */
describe('Idempotency-Key scoped to its caller, with service keys and customer tokens', () => {
  let issuer: TestIssuer;
  let one: RunningService;
  let two: RunningService;
  const ops = serviceKey('ops', ['stock:admin', 'orders:read']);
  const storefront = serviceKey('storefront', ['orders:place']);
  const backoffice = serviceKey('backoffice', ['orders:place', 'stock:admin']);
  let sku: string;

  beforeAll(async () => {
    issuer = await TestIssuer.start();
    const env = { API_KEYS_FILE: writeKeysFile([ops, storefront, backoffice]), ...issuer.env() };
    one = await startService(env);
    two = await startService(env);
    sku = uniqueSku('idem-scope');
    expect((await call(one.url, 'POST', '/skus', { sku, stock: 1000, segments: 4 }, bearer(ops.key))).status).toBe(201);
  });
  afterAll(async () => {
    await one?.stop();
    await two?.stop();
    await issuer?.stop();
  });

  const order = (url: string, credential: Record<string, string>, key: string, quantity = 2) =>
    call(url, 'POST', '/orders', { sku, quantity }, { ...credential, 'Idempotency-Key': key });

  it('places one order per customer for one key, and replays each customer its own, on either instance', async () => {
    const key = `checkout-${uniqueSku('k')}`;
    const bob = bearer(await issuer.token(uniqueSku('bob')));
    const alice = bearer(await issuer.token(uniqueSku('alice')));
    const before = (await auditSku(one.service.db, sku)).sold;

    const bobs = await order(one.url, bob, key, 2);
    expect(bobs.status).toBe(201);
    // Another quantity under the same key: Alice's own first request, not a reuse of Bob's.
    const alices = await order(two.url, alice, key, 5);
    expect(alices.status).toBe(201);
    expect(alices.body.orderId).not.toBe(bobs.body.orderId);

    const bobAgain = await order(two.url, bob, key, 2);
    expect(bobAgain.status).toBe(200);
    expect(bobAgain.body).toEqual(bobs.body);
    const aliceAgain = await order(one.url, alice, key, 5);
    expect(aliceAgain.status).toBe(200);
    expect(aliceAgain.body).toEqual(alices.body);
    // Within one caller, the key still refuses another request.
    expect((await order(one.url, alice, key, 1)).body.code).toBe('idempotency_key_reused');
    expect((await auditSku(one.service.db, sku)).sold - before).toBe(7);
  });

  it('keeps two service keys apart, and a service key apart from the customer it places for', async () => {
    const key = `svc-${uniqueSku('k')}`;
    const customer = uniqueSku('carol');
    const placeFor = (credential: Record<string, string>) =>
      call(
        one.url,
        'POST',
        '/orders',
        { sku, quantity: 1, customerId: customer },
        { ...credential, 'Idempotency-Key': key },
      );
    const answers = [
      await placeFor(bearer(storefront.key)),
      await placeFor(bearer(backoffice.key)),
      await placeFor(bearer(await issuer.token(customer))),
    ];
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201]);
    expect(new Set(answers.map((a) => a.body.orderId)).size).toBe(3);
    const replay = await placeFor(bearer(storefront.key));
    expect(replay.status).toBe(200);
    expect(replay.body.orderId).toBe(answers[0]!.body.orderId);
  });

  it('scopes admin writes alike: one key from two admin credentials restocks twice, a repeat adds nothing', async () => {
    const key = `restock-${uniqueSku('k')}`;
    const restock = (credential: Record<string, string>) =>
      call(one.url, 'POST', `/skus/${sku}/restock`, { quantity: 10 }, { ...credential, 'Idempotency-Key': key });
    const stockBefore = (await auditSku(one.service.db, sku)).totalStock;
    expect((await restock(bearer(ops.key))).status).toBe(200);
    const other = await restock(bearer(backoffice.key));
    expect(other.status).toBe(200);
    expect(other.headers.get('idempotent-replayed')).toBeNull();
    const repeat = await restock(bearer(ops.key));
    expect(repeat.headers.get('idempotent-replayed')).toBe('true');
    expect((await auditSku(one.service.db, sku)).totalStock - stockBefore).toBe(20);
  });
});

describe('Idempotency-Key with ADMIN_TOKEN alone (placing open)', () => {
  const ADMIN_TOKEN = `idem-admin-${Math.random().toString(36).slice(2)}-0123456789`;
  let svc: RunningService;
  let sku: string;
  beforeAll(async () => {
    svc = await startService({ ADMIN_TOKEN });
    sku = uniqueSku('idem-open');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 100, segments: 2 }, bearer(ADMIN_TOKEN))).status).toBe(
      201,
    );
  });
  afterAll(() => svc?.stop());

  it('never answers an anonymous caller with an order placed under a credential', async () => {
    const key = `shared-${uniqueSku('k')}`;
    const body = { sku, quantity: 1, customerId: 'alice' };
    const admins = await call(svc.url, 'POST', '/orders', body, { ...bearer(ADMIN_TOKEN), 'Idempotency-Key': key });
    expect(admins.status).toBe(201);
    const anonymous = await call(svc.url, 'POST', '/orders', body, { 'Idempotency-Key': key });
    expect(anonymous.status).toBe(201);
    expect(anonymous.body.orderId).not.toBe(admins.body.orderId);
    // Anonymous callers share one scope among themselves.
    const again = await call(svc.url, 'POST', '/orders', body, { 'Idempotency-Key': key });
    expect(again.status).toBe(200);
    expect(again.body.orderId).toBe(anonymous.body.orderId);
  });
});

describe('the migration scoping stored keys', () => {
  it("rewrites each order's key into its customer's scope (or anonymous), and admin writes' into ADMIN_TOKEN's", async () => {
    const own = await createOwnDatabase('idem_scope');
    try {
      const before = await own.migrator.migrateTo('20261202000000_coarse_delivery_errors');
      expect(before.error).toBeUndefined();
      const db = own.db;
      await sql`insert into skus (id, sku, segment_count, layout_version, total_stock) values (1, 'old', 1, 1, 10)`.execute(
        db,
      );
      await sql`insert into orders (id, sku_id, quantity, idempotency_key, request_fingerprint, customer_id) values
        ('00000000-0000-0000-0000-000000000001', 1, 1, 'k-1', 'fp', 'alice'),
        ('00000000-0000-0000-0000-000000000002', 1, 1, 'k-2', 'fp', null),
        ('00000000-0000-0000-0000-000000000003', 1, 1, null, null, 'bob')`.execute(db);
      await sql`insert into admin_requests (idempotency_key, request_fingerprint, status, response)
                values ('restock-1', 'fp', 200, '{}')`.execute(db);

      expect((await own.migrator.migrateToLatest()).error).toBeUndefined();
      const keys = async () => ({
        orders: (await sql<{ key: string | null }>`select idempotency_key as key from orders order by id`.execute(db))
          .rows,
        admin: (await sql<{ key: string }>`select idempotency_key as key from admin_requests`.execute(db)).rows,
      });
      expect(await keys()).toEqual({
        orders: [{ key: 'customer:alice k-1' }, { key: 'anonymous k-2' }, { key: null }],
        admin: [{ key: 'key:ADMIN_TOKEN restock-1' }],
      });

      expect((await own.migrator.migrateTo('20261202000000_coarse_delivery_errors')).error).toBeUndefined();
      expect(await keys()).toEqual({
        orders: [{ key: 'k-1' }, { key: 'k-2' }, { key: null }],
        admin: [{ key: 'restock-1' }],
      });
    } finally {
      await own.drop();
    }
  });
});
