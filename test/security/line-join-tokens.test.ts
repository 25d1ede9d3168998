import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';
import { bearer, TestIssuer } from './credentials.js';

const ADMIN_TOKEN = 'line-join-tokens-admin-0123456789';

/**
 * LINE_JOINS_REQUIRE_CUSTOMER_TOKEN: without customer tokens a join's customerId is whatever the caller claims, so one
 * caller can fill a line with invented customers. With the setting on, only a customer token joins, as its own
 * customer; any other credential is refused and the line is left as it was.
 */
describe('a line whose joins need a customer token', () => {
  let issuer: TestIssuer;
  let svc: RunningService;
  beforeAll(async () => {
    issuer = await TestIssuer.start();
    svc = await startService({ ADMIN_TOKEN, LINE_JOINS_REQUIRE_CUSTOMER_TOKEN: '1', ...issuer.env() });
  });
  afterAll(async () => {
    await svc?.stop();
    await issuer?.stop();
  });

  it('refuses a join that only names a customer, and gives a customer token its ticket', async () => {
    const admin = bearer(ADMIN_TOKEN);
    const sku = uniqueSku('tokenline');
    const opens = new Date(Date.now() + 3_600_000).toISOString();
    expect(
      (await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 4, saleStartsAt: opens }, admin)).status,
    ).toBe(201);
    const line = { capacity: 2, holdSeconds: 60 };
    expect((await call(svc.url, 'PUT', `/skus/${sku}/line`, line, admin)).status).toBe(200);

    for (const invented of ['bot-1', 'bot-2', 'bot-3']) {
      const refused = await call(svc.url, 'POST', `/skus/${sku}/line`, { customerId: invented }, admin);
      expect(refused.status, JSON.stringify(refused.body)).toBe(403);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(refused.body.code).toBe('forbidden');
    }
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`, undefined, admin)).body).toMatchObject({ tickets: 0 });

    const joined = await call(svc.url, 'POST', `/skus/${sku}/line`, {}, bearer(await issuer.token('ann')));
    expect(joined.status, JSON.stringify(joined.body)).toBe(201);
    expect(joined.body).toMatchObject({ sku, customerId: 'ann', status: 'waiting' });
    expect((await call(svc.url, 'GET', `/skus/${sku}/line`, undefined, admin)).body).toMatchObject({ tickets: 1 });
  });
});
