import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { readSegmentStates } from '../../src/inventory/inventory.repository.js';
import { writeBatch } from '../../src/inventory/order-writes.js';
import type { SegmentLocks } from '../../src/inventory/segment-locks.js';
import { redisKeys } from '../../src/lock/keys.js';
import { auditSku } from '../support/invariants.js';
import { segmentLocksProcess } from '../support/segment-locks.js';
import { call, startService, testEndpoints, uniqueSku } from '../support/service.js';

describe('fencing: a holder whose lease expired cannot write stale stock', () => {
  let db: Db;
  /** Two holders as two processes would be: each with its own lock client (a process never races itself). */
  let processes: ReturnType<typeof segmentLocksProcess>[];
  let staleHolder: SegmentLocks;
  let freshHolder: SegmentLocks;
  beforeAll(() => {
    const { redisUrl, databaseUrl } = testEndpoints();
    db = createDatabase(databaseUrl, 4);
    processes = [segmentLocksProcess(redisUrl, { ttlMs: 50 }), segmentLocksProcess(redisUrl, { ttlMs: 50 })];
    [staleHolder, freshHolder] = processes.map((p) => p.locks) as [SegmentLocks, SegmentLocks];
  });
  afterAll(async () => {
    await Promise.all(processes.map((p) => p.close()));
    await db.destroy();
  });

  /** A one-segment SKU created through the service's own path, so the row looks exactly like production's. */
  const oneSegmentSku = async (stock: number) => {
    const svc = await startService();
    const sku = uniqueSku('fence');
    await call(svc.url, 'POST', '/skus', { sku, stock, segments: 1 });
    await svc.stop();
    const { id } = await db.selectFrom('skus').select('id').where('sku', '=', sku).executeTakeFirstOrThrow();
    return { sku, ref: { sku, layoutVersion: 1, segment: 0 }, row: { skuId: id, layoutVersion: 1, segment: 0 } };
  };

  const readSegment = async (db: Db, row: { skuId: number; layoutVersion: number; segment: number }) =>
    (await readSegmentStates(db, [row]))[0];

  /** The service's own batch statement; true when the fence let the write (and so the order) through. */
  const deduct = async (
    row: { skuId: number; layoutVersion: number },
    state: { segment: number; available: number; fence: number },
    fence: number,
    quantity: number,
  ) => {
    const result = await writeBatch(db, {
      segments: [
        {
          ...row,
          segment: state.segment,
          availableSeen: state.available,
          fenceSeen: state.fence,
          fence,
          limitClaimed: false,
        },
      ],
      orders: [
        {
          orderId: randomUUID(),
          skuId: row.skuId,
          idempotencyKey: null,
          requestFingerprint: null,
          customerId: null,
          holdSeconds: null,
          takes: [{ segment: 0, quantity }],
          limitedSkuIds: [],
        },
      ],
    });
    return result.placed.size === 1;
  };

  it('refuses the stale holder once a newer holder has written', async () => {
    const { ref, row, sku } = await oneSegmentSku(10);
    const stale = (await staleHolder.tryAcquire(ref))!;
    const staleRead = (await readSegment(db, row))!;
    await sleep(80); // the lease (50 ms) runs out while the holder "stalls"
    const fresh = (await freshHolder.tryAcquire(ref))!;
    expect(fresh).not.toBeNull();
    expect(fresh.fence).toBeGreaterThan(stale.fence);
    const freshRead = (await readSegment(db, row))!;
    expect(await deduct(row, freshRead, fresh.fence, 3)).toBe(true);
    expect(await deduct(row, staleRead, stale.fence, 4)).toBe(false);
    expect(await staleHolder.release(stale)).toBe(false);
    expect(await freshHolder.release(fresh)).toBe(true);
    expect((await auditSku(db, sku)).available).toBe(7);
  });

  it('refuses the newer holder whose read a stale write overtook, so no update is lost', async () => {
    const { ref, row, sku } = await oneSegmentSku(10);
    const stale = (await staleHolder.tryAcquire(ref))!;
    const staleRead = (await readSegment(db, row))!;
    await sleep(80);
    const fresh = (await freshHolder.tryAcquire(ref))!;
    const freshRead = (await readSegment(db, row))!;
    // The stale write lands first: its read is still current, so it is a correct read-decide-write…
    expect(await deduct(row, staleRead, stale.fence, 4)).toBe(true);
    // …but the newer holder's read no longer is: it must read again rather than overwrite 6 with 7.
    expect(await deduct(row, freshRead, fresh.fence, 3)).toBe(false);
    const reread = (await readSegment(db, row))!;
    expect(reread.available).toBe(6);
    expect(await deduct(row, reread, fresh.fence, 3)).toBe(true);
    await freshHolder.release(fresh);
    expect((await auditSku(db, sku)).available).toBe(3);
  });

  it('keeps the books exact when every holder outlives its lease (TTL shorter than the critical section)', async () => {
    const svc = await startService({
      LOCK_TTL_MS: '40',
      CRITICAL_SECTION_DELAY_MS: '120',
      LOCK_WAIT_MS: '8000',
      LOCK_WATCHDOG: '0',
    });
    const sku = uniqueSku('stall');
    await call(svc.url, 'POST', '/skus', { sku, stock: 6, segments: 1 });
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => call(svc.url, 'POST', '/orders', { sku, quantity: 1 })),
    );
    await svc.stop();
    const statuses = answers.map((a) => a.status);
    expect(
      statuses.every((s) => [201, 409, 503].includes(s)),
      statuses.join(),
    ).toBe(true);
    const audit = await auditSku(db, sku);
    const acknowledged = statuses.filter((s) => s === 201).length;
    expect(audit.sold).toBe(acknowledged);
    expect(audit.available + audit.sold).toBe(6);
    expect(audit.ordersLedgerMismatch).toBe(0);
    expect(audit.ledgerOrders).toBe(acknowledged);
  });
});

describe('watchdog: a holder that loses its lease abandons the write', () => {
  it('stops the critical section when the lock vanishes, retries under a new lease, and deducts once', async () => {
    const svc = await startService({ LOCK_TTL_MS: '300', CRITICAL_SECTION_DELAY_MS: '500', LOCK_WATCHDOG: '1' });
    try {
      const sku = uniqueSku('lost');
      await call(svc.url, 'POST', '/skus', { sku, stock: 5, segments: 1 });
      const placing = call(svc.url, 'POST', '/orders', { sku, quantity: 2 });
      // While the holder sleeps in its critical section, the lock disappears (as after a Redis failover).
      await sleep(120);
      expect(
        await svc.service.redis.del(redisKeys.lock(redisKeys.segmentLock({ sku, layoutVersion: 1, segment: 0 }))),
      ).toBe(1);
      const placed = await placing;
      expect(placed.status).toBe(201);
      const metrics = await (await fetch(`${svc.url}/metrics`)).text();
      expect(Number(/^stock_lock_lost_total (\d+)/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
      const audit = await auditSku(svc.service.db, sku);
      expect(audit).toMatchObject({ sold: 2, available: 3, ledgerOrders: 1, ordersLedgerMismatch: 0 });
    } finally {
      await svc.stop();
    }
  });
});
