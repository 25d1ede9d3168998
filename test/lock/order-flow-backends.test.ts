import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createDatabase, type Db } from '../../src/db/database.js';
import { RedisServer, ZooKeeperServer, zookeeperMissing } from '../support/servers/index.js';
import { auditSku } from '../support/invariants.js';
import { call, ServiceProcess, startService, testEndpoints, uniqueSku } from '../support/service.js';
import { businessStep } from '../../loadtest/bench/business-step.js';

const zkMissing = zookeeperMissing();
if (zkMissing && process.env.CI) throw new Error(`ZooKeeper order-flow test cannot run: ${zkMissing}`);
if (zkMissing) console.warn(`SKIPPING the order flow on ZooKeeper: ${zkMissing}`);

/** Orders of `quantity` sent all at once, spread over the instances; their statuses. */
async function burst(urls: string[], sku: string, orders: number, quantity: number): Promise<string[]> {
  const answers = await Promise.all(
    Array.from({ length: orders }, (_, i) => call(urls[i % urls.length]!, 'POST', '/orders', { sku, quantity })),
  );
  return answers.map((a) => `${a.status}${a.status >= 400 ? ` ${a.body?.code}` : ''}`);
}

/** `total` calls of `send`, at most `connections` of them in flight at once, as a load generator keeps them. */
async function atConcurrency<T>(connections: number, total: number, send: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = [];
  let next = 0;
  const connection = async () => {
    while (next < total) {
      const i = next++;
      results[i] = await send(i);
    }
  };
  await Promise.all(Array.from({ length: connections }, connection));
  return results;
}

/** How many answers had this status; the failure message lists them all, with their problem codes. */
const count = (answers: string[], status: number) => answers.filter((a) => a.startsWith(String(status))).length;

/**
 * The order flow, unchanged, on every LOCK_BACKEND: concurrent orders against a smaller stock sell it exactly; and,
 * with two real service processes per case as production runs them, racing covers end in 201 or 409 and Redlock with
 * a dead node answers no 503.
 */
describe('the order flow on each lock backend', () => {
  let db: Db;
  let nodes: RedisServer[];
  let zookeeper: ZooKeeperServer | undefined;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    // One case kills a node: its `stop()` is a SIGKILL.
    const crashable = { stopMode: 'immediate' } as const;
    nodes = await Promise.all([
      RedisServer.start(crashable),
      RedisServer.start(crashable),
      RedisServer.start(crashable),
    ]);
    zookeeper = zkMissing ? undefined : await ZooKeeperServer.start();
  });
  afterAll(async () => {
    await db?.destroy();
    await Promise.all((nodes ?? []).map((n) => n.destroy()));
    await zookeeper?.destroy();
  });

  const backends: [string, () => Record<string, string>][] = [
    ['redis', () => ({ LOCK_BACKEND: 'redis' })],
    ['postgres', () => ({ LOCK_BACKEND: 'postgres' })],
    ['redlock', () => ({ LOCK_BACKEND: 'redlock', REDIS_LOCK_URLS: nodes.map((n) => n.url).join(',') })],
    ['zookeeper', () => ({ LOCK_BACKEND: 'zookeeper', ZOOKEEPER_CONNECT: zookeeper!.connect })],
  ];

  for (const [backend, env] of backends) {
    it.skipIf(backend === 'zookeeper' && zkMissing !== undefined)(
      `sells exactly the stock on ${backend}, every sale in the ledger`,
      async () => {
        const service = await startService({ ...env(), LOCK_WAIT_MS: '15000' }, { whileHeld: businessStep(2) });
        try {
          const sku = uniqueSku(`flow-${backend}`);
          expect((await call(service.url, 'POST', '/skus', { sku, stock: 60, segments: 4 })).status).toBe(201);
          const answers = await Promise.all(
            Array.from({ length: 90 }, () => call(service.url, 'POST', '/orders', { sku, quantity: 1 })),
          );
          const statuses = answers.map((a) => a.status);
          expect(statuses.filter((s) => s === 201).length, statuses.join()).toBe(60);
          expect(statuses.filter((s) => s === 409).length, statuses.join()).toBe(30);
          const audit = await auditSku(db, sku);
          expect(audit).toMatchObject({
            sold: 60,
            available: 0,
            negativeSegments: 0,
            ordersWithoutLedger: 0,
            ordersLedgerMismatch: 0,
            ledgerOrders: 60,
          });
        } finally {
          await service.stop();
        }
      },
    );
  }

  for (const [backend, env] of backends) {
    it.skipIf(backend === 'zookeeper' && zkMissing !== undefined)(
      `${backend}: orders that must be covered from several segments, racing near sell-out, end in 201 or 409`,
      async () => {
        // A budget of 10 s: on two cores shared with the test, both services and the stores, the race takes seconds;
        // what is asserted is that no order ends without a definitive answer, however long the budget.
        const settings = { ...env(), LOCK_WAIT_MS: '10000' };
        const fleet = await Promise.all([ServiceProcess.spawn(settings), ServiceProcess.spawn(settings)]);
        try {
          const urls = fleet.map((f) => f.url);
          const sku = uniqueSku(`cover-${backend}`);
          // 20 segments of 2 units: every order of 5 needs three segments; 40 units serve exactly 8 of 20.
          expect((await call(urls[0]!, 'POST', '/skus', { sku, stock: 40, segments: 20 })).status).toBe(201);
          const statuses = await burst(urls, sku, 20, 5);
          expect(count(statuses, 201), statuses.join()).toBe(8);
          expect(count(statuses, 409), statuses.join()).toBe(12);
          expect(await auditSku(db, sku)).toMatchObject({ sold: 40, available: 0, negativeSegments: 0 });
        } finally {
          await Promise.all(fleet.map((f) => f.stop()));
        }
      },
    );
  }

  for (const [backend, env] of backends) {
    it.skipIf(backend === 'zookeeper' && zkMissing !== undefined)(
      `${backend}: 1,500 one-unit orders at 120 connections over two instances get 201 or 409, never 503`,
      async () => {
        // The budget of the cover test above: with the default 2 s, a busy machine (two services, the store and this
        // test on two cores) makes 503 lock_busy a fair answer. What is asserted is that no waiter is starved or forgotten.
        const settings = { ...env(), LOCK_WAIT_MS: '10000' };
        const fleet = await Promise.all([ServiceProcess.spawn(settings), ServiceProcess.spawn(settings)]);
        try {
          const urls = fleet.map((f) => f.url);
          const sku = uniqueSku(`load-${backend}`);
          expect((await call(urls[0]!, 'POST', '/skus', { sku, stock: 500, segments: 20 })).status).toBe(201);
          const statuses = await atConcurrency(120, 1_500, (i) =>
            call(urls[i % urls.length]!, 'POST', '/orders', { sku, quantity: 1 }).then(
              (a) => `${a.status}${a.status >= 400 ? ` ${a.body?.code}` : ''}`,
            ),
          );
          expect(count(statuses, 201), statuses.join()).toBe(500);
          expect(count(statuses, 409), statuses.join()).toBe(1_000);
          expect(await auditSku(db, sku)).toMatchObject({ sold: 500, available: 0, ordersLedgerMismatch: 0 });
        } finally {
          await Promise.all(fleet.map((f) => f.stop()));
        }
      },
    );
  }

  it('redlock with one of three nodes dead: no order waits out its budget, the books stay exact', async () => {
    const urls = nodes.map((n) => n.url).join(',');
    const fleet = await Promise.all([
      ServiceProcess.spawn({ LOCK_BACKEND: 'redlock', REDIS_LOCK_URLS: urls }),
      ServiceProcess.spawn({ LOCK_BACKEND: 'redlock', REDIS_LOCK_URLS: urls }),
    ]);
    try {
      const sku = uniqueSku('redlock-dead-node');
      expect((await call(fleet[0]!.url, 'POST', '/skus', { sku, stock: 200, segments: 20 })).status).toBe(201);
      await nodes[0]!.stop();
      const statuses: string[] = [];
      // 600 orders of one unit, 60 at a time, against 200 units.
      for (let round = 0; round < 10; round++)
        statuses.push(
          ...(await burst(
            fleet.map((f) => f.url),
            sku,
            60,
            1,
          )),
        );
      expect(count(statuses, 503), statuses.join()).toBe(0);
      expect(count(statuses, 201)).toBe(200);
      expect(count(statuses, 409)).toBe(400);
      expect(await auditSku(db, sku)).toMatchObject({ sold: 200, available: 0, ordersLedgerMismatch: 0 });
    } finally {
      await Promise.all(fleet.map((f) => f.stop()));
      await nodes[0]!.resume();
    }
  });
});

describe('lock configuration', () => {
  it('names the variable a lock backend is missing or given wrong', () => {
    expect(() => loadConfig({ LOCK_BACKEND: 'redlock' })).toThrow(/^invalid REDIS_LOCK_URLS/);
    expect(() => loadConfig({ LOCK_BACKEND: 'redlock', REDIS_LOCK_URLS: 'redis://a:1,http://b:2' })).toThrow(
      /^invalid REDIS_LOCK_URLS/,
    );
    expect(() => loadConfig({ LOCK_BACKEND: 'zookeeper' })).toThrow(/^invalid ZOOKEEPER_CONNECT/);
    expect(() => loadConfig({ LOCK_BACKEND: 'zookeeper', ZOOKEEPER_CONNECT: 'no port' })).toThrow(
      /^invalid ZOOKEEPER_CONNECT/,
    );
    expect(() => loadConfig({ LOCK_BACKEND: 'etcd' })).toThrow(/^invalid LOCK_BACKEND/);
    expect(() => loadConfig({ LOCK_WATCHDOG: 'maybe' })).toThrow(/^invalid LOCK_WATCHDOG/);
  });

  it('defaults to the Redis backend with the watchdog on, and reads the node lists', () => {
    expect(loadConfig({})).toMatchObject({ lockBackend: 'redis', lockWatchdog: true, redisLockUrls: [] });
    const config = loadConfig({
      LOCK_BACKEND: 'redlock',
      REDIS_LOCK_URLS: ' redis://127.0.0.1:7001, redis://127.0.0.1:7002 ',
      LOCK_WATCHDOG: '0',
    });
    expect(config).toMatchObject({
      lockBackend: 'redlock',
      redisLockUrls: ['redis://127.0.0.1:7001', 'redis://127.0.0.1:7002'],
      lockWatchdog: false,
    });
    expect(
      loadConfig({ LOCK_BACKEND: 'zookeeper', ZOOKEEPER_CONNECT: '127.0.0.1:2181,zk-2:2181/stock' }).zookeeperConnect,
    ).toBe('127.0.0.1:2181,zk-2:2181/stock');
  });
});
