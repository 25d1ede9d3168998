import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { auditSku } from '../support/invariants.js';
import { call, ServiceProcess, testEndpoints, uniqueSku } from '../support/service.js';

/** Admin writes retried or raced with one Idempotency-Key, across two real service processes. */
describe('idempotent admin writes', () => {
  let db: Db;
  let fleet: ServiceProcess[];
  const url = (i: number) => fleet[i % fleet.length]!.url;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    fleet = await Promise.all([ServiceProcess.spawn(), ServiceProcess.spawn()]);
  });
  afterAll(async () => {
    await Promise.all((fleet ?? []).map((f) => f.stop()));
    await db?.destroy();
  });

  const keyed = (key: string) => ({ 'idempotency-key': key });

  it('creates a SKU once for a retried POST /skus, and answers the retry as the first', async () => {
    const sku = uniqueSku('idem-create');
    const body = { sku, stock: 40, segments: 4 };
    const first = await call(url(0), 'POST', '/skus', body, keyed(`${sku}-k`));
    const retry = await call(url(1), 'POST', '/skus', body, keyed(`${sku}-k`));
    expect(first.status).toBe(201);
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(first.body);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    // Without the key the same body is a second create, refused as such.
    expect((await call(url(0), 'POST', '/skus', body)).body.code).toBe('sku_exists');
  });

  it('creates a SKU once for ten racing POST /skus with one key, and answers all ten alike', async () => {
    const sku = uniqueSku('idem-create-race');
    const body = { sku, stock: 30, segments: 3 };
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => call(url(i), 'POST', '/skus', body, keyed(`${sku}-k`))),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(201));
    for (const answer of answers) expect(answer.body).toEqual(answers[0]!.body);
    expect(await auditSku(db, sku)).toMatchObject({ totalStock: 30, additions: 30, available: 30 });
  });

  it('adds stock once for twenty racing restocks with one key, on two instances; each gets the same answer', async () => {
    const sku = uniqueSku('idem-restock');
    expect((await call(url(0), 'POST', '/skus', { sku, stock: 100, segments: 4 })).status).toBe(201);
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(url(i), 'POST', `/skus/${sku}/restock`, { quantity: 7 }, keyed(`${sku}-once`)),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    for (const answer of answers) expect(answer.body).toEqual(answers[0]!.body);
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    expect(answers[0]!.body).toMatchObject({ stock: 107, available: 107 });
    expect(await auditSku(db, sku)).toMatchObject({ totalStock: 107, additions: 107, available: 107 });
    // A second key is a second restock.
    const again = await call(url(1), 'POST', `/skus/${sku}/restock`, { quantity: 7 }, keyed(`${sku}-twice`));
    expect(again.body).toMatchObject({ stock: 114 });
  });

  it('re-segments once for a retried PUT /skus/:sku/segments', async () => {
    const sku = uniqueSku('idem-segments');
    expect((await call(url(0), 'POST', '/skus', { sku, stock: 60, segments: 3 })).status).toBe(201);
    const put = (i: number) => call(url(i), 'PUT', `/skus/${sku}/segments`, { segments: 6 }, keyed(`${sku}-k`));
    const [first, retry] = [await put(0), await put(1)];
    expect(first.status).toBe(200);
    expect(retry.body).toEqual(first.body);
    const { layout_version } = await db
      .selectFrom('skus')
      .select('layout_version')
      .where('sku', '=', sku)
      .executeTakeFirstOrThrow();
    expect(layout_version).toBe(2);
  });

  it('refuses a key reused for another body, SKU or route with 422, and a malformed key with 400, changing nothing', async () => {
    const sku = uniqueSku('idem-reused');
    expect((await call(url(0), 'POST', '/skus', { sku, stock: 10, segments: 2 })).status).toBe(201);
    const key = keyed(`${sku}-k`);
    expect((await call(url(0), 'POST', `/skus/${sku}/restock`, { quantity: 5 }, key)).status).toBe(200);
    const refusals = [
      await call(url(1), 'POST', `/skus/${sku}/restock`, { quantity: 6 }, key),
      await call(url(0), 'PUT', `/skus/${sku}/segments`, { segments: 4 }, key),
      await call(url(1), 'POST', '/skus', { sku: `${sku}-2`, stock: 5, segments: 1 }, key),
    ];
    for (const refusal of refusals) {
      expect(refusal.status).toBe(422);
      expect(refusal.body.code).toBe('idempotency_key_reused');
    }
    const malformed = await call(url(0), 'POST', `/skus/${sku}/restock`, { quantity: 5 }, keyed('bad key'));
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe('invalid_idempotency_key');
    expect(await auditSku(db, sku)).toMatchObject({ totalStock: 15, available: 15 });
    expect((await call(url(0), 'GET', `/skus/${sku}-2`)).status).toBe(404);
  });
});
