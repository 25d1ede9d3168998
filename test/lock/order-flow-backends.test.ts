import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createDatabase, type Db } from '../../src/db/database.js';
import { RedisServer, ZooKeeperServer, zookeeperMissing } from '../../src/dev/servers/index.js';
import { auditSku } from '../support/invariants.js';
import { call, startService, testEndpoints, uniqueSku } from '../support/service.js';

const zkMissing = zookeeperMissing();
if (zkMissing && process.env.CI) throw new Error(`ZooKeeper order-flow test cannot run: ${zkMissing}`);
if (zkMissing) console.warn(`SKIPPING the order flow on ZooKeeper: ${zkMissing}`);

/** The order flow, unchanged, on every LOCK_BACKEND: concurrent orders against a smaller stock sell it exactly. */
describe('the order flow on each lock backend', () => {
  let db: Db;
  let nodes: RedisServer[];
  let zookeeper: ZooKeeperServer | undefined;
  beforeAll(async () => {
    db = createDatabase(testEndpoints().databaseUrl, 2);
    nodes = await Promise.all([RedisServer.start(), RedisServer.start(), RedisServer.start()]);
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
        const service = await startService({ ...env(), LOCK_WAIT_MS: '15000', CRITICAL_SECTION_DELAY_MS: '2' });
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
