import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditSku } from '../support/invariants.js';
import { call, type RunningService, startService, uniqueSku } from '../support/service.js';

describe('Idempotency-Key', () => {
  let svc: RunningService;
  let sku: string;
  beforeAll(async () => {
    svc = await startService();
    sku = uniqueSku('idem');
    expect((await call(svc.url, 'POST', '/skus', { sku, stock: 1000, segments: 4 })).status).toBe(201);
  });
  afterAll(() => svc.stop());

  const order = (key: string, quantity = 2, target = sku) =>
    call(svc.url, 'POST', '/orders', { sku: target, quantity }, { 'Idempotency-Key': key });

  it('returns the same order for a repeat and deducts nothing more', async () => {
    const key = uniqueSku('key');
    const first = await order(key);
    expect(first.status).toBe(201);
    const again = await order(key);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect((await auditSku(svc.service.db, sku)).sold).toBe(2);
  });

  it('refuses the same key with a different body with 422', async () => {
    const key = uniqueSku('key');
    expect((await order(key, 1)).status).toBe(201);
    const reused = await order(key, 5);
    expect(reused.status).toBe(422);
    expect(reused.body.code).toBe('idempotency_key_reused');
  });

  it('places exactly one order when many requests with one key race', async () => {
    const before = (await auditSku(svc.service.db, sku)).sold;
    const key = uniqueSku('race');
    const answers = await Promise.all(Array.from({ length: 25 }, () => order(key, 3)));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.filter((s) => s === 200)).toHaveLength(24);
    expect(new Set(answers.map((a) => a.body.orderId)).size).toBe(1);
    const audit = await auditSku(svc.service.db, sku);
    expect(audit.sold - before).toBe(3);
    expect(audit.ordersLedgerMismatch).toBe(0);
  });

  it('rejects malformed keys with 400 and changes nothing', async () => {
    const before = await auditSku(svc.service.db, sku);
    for (const key of ['a'.repeat(129), 'has space', 'tab\there']) {
      const answer = await order(key);
      expect(answer.status).toBe(400);
      expect(answer.body.code).toBe('invalid_idempotency_key');
    }
    expect(await auditSku(svc.service.db, sku)).toEqual(before);
  });
});
