import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisKeys, type SegmentRef } from '../../src/lock/keys.js';
import { defineLockCommands, ScriptResult } from '../../src/lock/scripts.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

describe('lock scripts, called directly', () => {
  let redis: Redis;
  let listener: Redis;
  const ref = (segment = 0): SegmentRef => ({ sku: uniqueSku('lua'), layoutVersion: 1, segment });

  beforeAll(() => {
    redis = new Redis(testEndpoints().redisUrl);
    listener = new Redis(testEndpoints().redisUrl);
    defineLockCommands(redis);
  });
  afterAll(() => {
    redis.disconnect();
    listener.disconnect();
  });

  /** The token, or ScriptResult.LockHeld. */
  const acquire = async (r: SegmentRef, owner: string, ttl = 10_000) => {
    const result = await redis.acquireLock(redisKeys.segmentLock(r), redisKeys.segmentFence(r), owner, ttl);
    return Array.isArray(result) ? result[0] : result;
  };

  it('acquires once, refuses a second owner, and issues strictly increasing fencing tokens', async () => {
    const r = ref();
    const first = await acquire(r, 'a');
    expect(first).toBeGreaterThan(0);
    expect(await acquire(r, 'b')).toBe(ScriptResult.LockHeld);
    expect(await redis.pttl(redisKeys.segmentLock(r))).toBeGreaterThan(9_000);

    const tokens = [first];
    for (let i = 0; i < 20; i++) {
      const owner = tokens.length === 1 ? 'a' : `o${i - 1}`;
      expect(await redis.releaseLock(redisKeys.segmentLock(r), owner, redisKeys.unlockChannel(r.sku), 'n')).toBe(1);
      tokens.push(await acquire(r, `o${i}`));
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1]!);
  });

  it('tells each acquisition the token issued just before its own', async () => {
    const r = ref();
    const [first, none] = (await redis.acquireLock(
      redisKeys.segmentLock(r),
      redisKeys.segmentFence(r),
      'a',
      10_000,
    )) as number[];
    expect(none).toBe(0);
    await redis.releaseLock(redisKeys.segmentLock(r), 'a', redisKeys.unlockChannel(r.sku), 'n');
    const [second, previous] = (await redis.acquireLock(
      redisKeys.segmentLock(r),
      redisKeys.segmentFence(r),
      'b',
      10_000,
    )) as number[];
    expect(previous).toBe(first);
    expect(second).toBeGreaterThan(first!);
  });

  it('release and extend refuse a token that does not own the lock, and change nothing', async () => {
    const r = ref();
    await acquire(r, 'owner');
    const key = redisKeys.segmentLock(r);
    expect(await redis.releaseLock(key, 'intruder', redisKeys.unlockChannel(r.sku), 'n')).toBe(ScriptResult.NotOwner);
    expect(await redis.extendLock(key, 'intruder', 60_000)).toBe(ScriptResult.NotOwner);
    expect(await redis.get(key)).toBe('owner');
    expect(await redis.pttl(key)).toBeLessThanOrEqual(10_000);
    expect(await redis.extendLock(key, 'owner', 60_000)).toBe(ScriptResult.Done);
    expect(await redis.pttl(key)).toBeGreaterThan(10_000);
  });

  it('lets the lease expire, after which another owner gets a larger token and the old owner cannot release', async () => {
    const r = ref();
    const stale = await acquire(r, 'stale', 50);
    await sleep(80);
    const fresh = await acquire(r, 'fresh');
    expect(fresh).toBeGreaterThan(stale);
    expect(await redis.releaseLock(redisKeys.segmentLock(r), 'stale', redisKeys.unlockChannel(r.sku), 'n')).toBe(0);
    expect(await redis.get(redisKeys.segmentLock(r))).toBe('fresh');
  });

  it('publishes an unlock notice on release', async () => {
    const r = ref(3);
    const channel = redisKeys.unlockChannel(r.sku);
    await listener.subscribe(channel);
    const received = new Promise<string>((resolve) =>
      listener.once('message', (_c, message: string) => resolve(message)),
    );
    await acquire(r, 'x');
    await redis.releaseLock(redisKeys.segmentLock(r), 'x', channel, '1/3');
    expect(await received).toBe('1/3');
    await listener.unsubscribe(channel);
  });

  it('keeps tokens rising when the counter is lost, as after a Redis restart without persistence', async () => {
    const r = ref();
    const before = await acquire(r, 'a');
    await redis.del(redisKeys.segmentLock(r), redisKeys.segmentFence(r));
    const after = await acquire(r, 'b');
    expect(after).toBeGreaterThan(before);
  });
});
