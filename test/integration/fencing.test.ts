import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type Db } from '../../src/db/database.js';
import { readSegmentStates } from '../../src/orders/batch-statements.js';
import { writeBatch } from '../../src/orders/order-writes.js';
import { redisKeys } from '../../src/lock/keys.js';
import { auditSku } from '../support/invariants.js';
import { scrapeCounter } from '../support/scrape-metric.js';
import { segmentLocksProcess } from '../support/segment-locks.js';
import { call, startService, testEndpoints, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';
import { businessStep } from '../../loadtest/bench/business-step.js';

describe('fencing: a holder whose lease expired cannot write stale stock', () => {
  let db: Db;
  /** Two holders as two processes would be: each with its own lock client (a process never races itself). */
  let processes: ReturnType<typeof segmentLocksProcess>[];
  let staleHolder: (typeof processes)[number];
  let freshHolder: (typeof processes)[number];
  beforeAll(() => {
    const { redisUrl, databaseUrl } = testEndpoints();
    db = createDatabase(databaseUrl, 4);
    // The stale holder's lease (50 ms) runs out while it stalls; the fresh one's outlasts the test, however slow.
    processes = [segmentLocksProcess(redisUrl, { ttlMs: 50 }), segmentLocksProcess(redisUrl, { ttlMs: 10_000 })];
    [staleHolder, freshHolder] = processes as [(typeof processes)[number], (typeof processes)[number]];
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

  it('keeps the books exact when a holder outlives its lease with its write in flight and a newer holder writes too', async () => {
    // Two instances, as two processes would be; leases of 300 ms that nothing renews.
    const env = { LOCK_TTL_MS: '300', LOCK_WATCHDOG: '0', LOCK_WAIT_MS: '15000' };
    const [first, second] = [await startService(env), await startService(env)];
    const blocker = new pg.Client({ connectionString: testEndpoints().databaseUrl });
    await blocker.connect();
    try {
      const sku = uniqueSku('outlive');
      await call(first.url, 'POST', '/skus', { sku, stock: 6, segments: 1 });
      const lockKey = redisKeys.lock(redisKeys.segmentLock({ sku, layoutVersion: 1, segment: 0 }));
      const holderOf = async () => {
        const [owner, fence] = await first.service.redis.hmget(lockKey, 'owner', 'fence');
        return owner === null ? null : { owner, fence: Number(fence) };
      };
      /** Statements of this database waiting for a lock another holds: the order writes, held up past their lease. */
      const writesWaiting = async () => {
        const { rows } = await blocker.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and cardinality(pg_blocking_pids(pid)) > 0`,
        );
        return rows[0]!.n;
      };
      // The segment's row is held by someone else for a while: every write to it waits in Postgres.
      await blocker.query('begin');
      await blocker.query(
        'select 1 from stock_segments where sku_id = (select id from skus where sku = $1) for update',
        [sku],
      );
      const firstOrder = call(first.url, 'POST', '/orders', { sku, quantity: 1 });
      expect(await waitFor(async () => (await writesWaiting()) === 1, 10_000)).toBeLessThan(Infinity);
      const outlived = (await holderOf())!;
      expect(outlived).not.toBeNull();
      // Its lease runs out while its write waits; a newer holder takes the segment, reads it, and writes too.
      expect(await waitFor(async () => (await holderOf()) === null, 5_000)).toBeLessThan(Infinity);
      const secondOrder = call(second.url, 'POST', '/orders', { sku, quantity: 1 });
      expect(await waitFor(async () => (await writesWaiting()) === 2, 10_000)).toBeLessThan(Infinity);
      const newer = (await holderOf())!;
      expect(newer.owner).not.toBe(outlived.owner);
      expect(newer.fence).toBeGreaterThan(outlived.fence);

      // Both writes were made from the same read (6 units); the row lets them through one after the other.
      await blocker.query('commit');
      const answers = await Promise.all([firstOrder, secondOrder]);
      const fencedOut = await scrapeCounter([first.url, second.url], 'stock_fenced_out_total');
      // The later of the two found the row changed since its read and was turned away: it read again and retried.
      expect(fencedOut).toBeGreaterThanOrEqual(1);
      expect(answers.map((a) => a.status)).toEqual([201, 201]);
      const audit = await auditSku(db, sku);
      expect(audit).toMatchObject({ sold: 2, available: 4, ledgerOrders: 2, ordersLedgerMismatch: 0 });
    } finally {
      await blocker.query('rollback').catch(() => {});
      await blocker.end();
      await Promise.all([first.stop(), second.stop()]);
    }
  }, 60_000);
});

describe('watchdog: a holder that loses its lease abandons the write', () => {
  it('stops the critical section when the lock vanishes, retries under a new lease, and deducts once', async () => {
    const svc = await startService({ LOCK_TTL_MS: '300', LOCK_WATCHDOG: '1' }, { whileHeld: businessStep(500) });
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
