import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisServer } from '../../src/dev/servers/index.js';
import { ServiceFleet } from '../support/service-fleet.js';
import { call, ServiceProcess, uniqueSku } from '../support/service.js';
import { waitFor } from '../support/wait-for.js';

/**
 * A client address of its own per test, sent as X-Forwarded-For behind TRUST_PROXY_HOPS=1: the counters live in the
 * test Redis that every test shares, and a minute outlives a test file.
 */
const clientAddress = () =>
  `10.${Math.floor(Math.random() * 256)}.${Math.floor(Math.random() * 256)}.${1 + Math.floor(Math.random() * 254)}`;

describe('the order rate limit, shared in Redis', () => {
  let fleet: ServiceFleet;
  beforeAll(async () => {
    fleet = await ServiceFleet.start(2, { RATE_LIMIT_ORDERS_PER_MINUTE: '6', TRUST_PROXY_HOPS: '1' });
  });
  afterAll(() => fleet?.stopAll());

  it('holds across two instances: a client spreading its orders over both gets the limit once, not twice', async () => {
    const [a, b] = fleet.members as [ServiceProcess, ServiceProcess];
    const sku = uniqueSku('rl-shared');
    expect((await call(a.url, 'POST', '/skus', { sku, stock: 1000, segments: 2 })).status).toBe(201);
    const client = { 'x-forwarded-for': clientAddress() };
    const order = (member: ServiceProcess) => call(member.url, 'POST', '/orders', { sku, quantity: 1 }, client);

    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await order(i % 2 === 0 ? a : b)).status);
    expect(statuses).toEqual(Array(6).fill(201));
    // Each instance has seen only 3 orders from this client, and both refuse the next.
    for (const member of [a, b]) {
      const limited = await order(member);
      expect(limited.status).toBe(429);
      expect(limited.body.code).toBe('rate_limited');
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    // Another client is counted apart.
    const other = await call(b.url, 'POST', '/orders', { sku, quantity: 1 }, { 'x-forwarded-for': clientAddress() });
    expect(other.status).toBe(201);
    expect((await call(a.url, 'GET', `/skus/${sku}`)).body.sold).toBe(7);
  });
});

describe('the order rate limit while its Redis is down', () => {
  let redis: RedisServer;
  let service: ServiceProcess;
  beforeAll(async () => {
    redis = await RedisServer.start({ stopMode: 'immediate' });
    // Locks in Postgres: with Redis gone, orders can still be placed, so only the limiter could refuse them.
    service = await ServiceProcess.spawn({
      REDIS_URL: redis.url,
      LOCK_BACKEND: 'postgres',
      RATE_LIMIT_ORDERS_PER_MINUTE: '2',
      TRUST_PROXY_HOPS: '1',
    });
  });
  afterAll(async () => {
    await service?.stop();
    await redis?.destroy();
  });

  it('fails open: orders over the limit are placed while Redis is away, and limited again once it is back', async () => {
    const sku = uniqueSku('rl-open');
    expect((await call(service.url, 'POST', '/skus', { sku, stock: 100, segments: 1 })).status).toBe(201);
    const client = { 'x-forwarded-for': clientAddress() };
    const order = () => call(service.url, 'POST', '/orders', { sku, quantity: 1 }, client);
    expect((await order()).status).toBe(201);
    expect((await order()).status).toBe(201);
    expect((await order()).status).toBe(429);

    await redis.stop();
    const during = [];
    for (let i = 0; i < 4; i++) during.push((await order()).status);
    expect(during).toEqual([201, 201, 201, 201]);
    expect(service.output.join('\n')).toContain('rate limit store unavailable');

    await redis.resume();
    // The client is limited again once the limiter reaches Redis (whether the counter survived or restarted).
    const limitedWithin = await waitFor(async () => (await order()).status === 429, 15_000, 100);
    expect(limitedWithin).toBeLessThan(15_000);
  });
});
