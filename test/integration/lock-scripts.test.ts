import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisKeys } from '../../src/lock/keys.js';
import { defineLockCommands, LockCode } from '../../src/lock/scripts.js';
import { testEndpoints, uniqueSku } from '../support/service.js';

describe('lock scripts, called directly', () => {
  let redis: Redis;
  let listener: Redis;
  const lockName = () => redisKeys.segmentLock({ sku: uniqueSku('lua'), layoutVersion: 1, segment: 0 });

  beforeAll(() => {
    redis = new Redis(testEndpoints().redisUrl);
    listener = new Redis(testEndpoints().redisUrl);
    defineLockCommands(redis);
  });
  afterAll(() => {
    redis.disconnect();
    listener.disconnect();
  });

  const acquire = (name: string, owner: string, ttl = 10_000, mode: 'try' | 'queue' | 'poll' = 'try') =>
    redis.lockAcquire(...redisKeys.scriptKeys(name), owner, ttl, mode, 3_000, redisKeys.grantedChannel(name));
  const release = (name: string, owner: string, notice = 'n') =>
    redis.lockRelease(
      ...redisKeys.scriptKeys(name),
      owner,
      10_000,
      redisKeys.releasedChannel(name),
      notice,
      redisKeys.grantedChannel(name),
      '0',
    );

  it('acquires once, refuses a second owner, and issues strictly increasing fencing tokens', async () => {
    const name = lockName();
    const [first] = await acquire(name, 'a');
    expect(first).toBeGreaterThan(0);
    expect((await acquire(name, 'b'))[0]).toBe(LockCode.Busy);
    expect(await redis.pttl(redisKeys.lock(name))).toBeGreaterThan(9_000);

    const tokens = [first];
    for (let i = 0; i < 20; i++) {
      const owner = tokens.length === 1 ? 'a' : `o${i - 1}`;
      expect((await release(name, owner))[0]).toBe(0);
      tokens.push((await acquire(name, `o${i}`))[0]);
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1]!);
  });

  it('tells each new hold the token issued just before its own', async () => {
    const name = lockName();
    const [first, , none] = await acquire(name, 'a');
    expect(none).toBe(0);
    await release(name, 'a');
    const [second, count, previous] = await acquire(name, 'b');
    expect(count).toBe(1);
    expect(previous).toBe(first);
    expect(second).toBeGreaterThan(first);
  });

  it('counts re-entries by the same owner under the same token, and frees the lock at count 0', async () => {
    const name = lockName();
    const [fence] = await acquire(name, 'a');
    expect(await acquire(name, 'a')).toEqual([fence, 2, 0, fence]);
    expect(await release(name, 'a')).toEqual([1]);
    expect((await acquire(name, 'b'))[0]).toBe(LockCode.Busy);
    // Freed, and 'b' is said to have tried meanwhile (a holder passing the lock within its process then yields).
    expect(await release(name, 'a')).toEqual([0, 1]);
    expect((await acquire(name, 'b'))[0]).toBeGreaterThan(fence);
  });

  it('release and extend refuse an owner that does not hold the lock, and change nothing', async () => {
    const name = lockName();
    await acquire(name, 'owner');
    expect(await release(name, 'intruder')).toEqual([LockCode.Lost]);
    expect(await redis.lockExtend(redisKeys.lock(name), 'intruder', 60_000)).toBe(LockCode.Lost);
    expect(await redis.hget(redisKeys.lock(name), 'owner')).toBe('owner');
    expect(await redis.pttl(redisKeys.lock(name))).toBeLessThanOrEqual(10_000);
    expect(await redis.lockExtend(redisKeys.lock(name), 'owner', 60_000)).toBe(1);
    expect(await redis.pttl(redisKeys.lock(name))).toBeGreaterThan(10_000);
  });

  it('lets the lease expire, after which another owner gets a larger token and the old owner cannot release', async () => {
    const name = lockName();
    const [stale] = await acquire(name, 'stale', 50);
    await sleep(80);
    const [fresh] = await acquire(name, 'fresh');
    expect(fresh).toBeGreaterThan(stale);
    expect(await release(name, 'stale')).toEqual([LockCode.Lost]);
    expect(await redis.hget(redisKeys.lock(name), 'owner')).toBe('fresh');
  });

  it("publishes a release notice on the lock's own shard channel once another owner tried to take it", async () => {
    const name = lockName();
    const channel = redisKeys.releasedChannel(name);
    await listener.ssubscribe(channel);
    const received: string[] = [];
    const onMessage = (from: string, message: string) => {
      if (from === channel) received.push(message);
    };
    listener.on('smessage', onMessage);
    // Nobody else wanted it: nobody waits, so no notice.
    await acquire(name, 'x');
    await release(name, 'x', 'instance-6');
    // Another owner tried while it was held: it may wait for the notice.
    await acquire(name, 'y');
    expect((await acquire(name, 'z'))[0]).toBe(LockCode.Busy);
    await release(name, 'y', 'instance-7');
    // A round trip on the listener's own connection: every message published before it has been delivered.
    await listener.ping();
    listener.off('smessage', onMessage);
    await listener.sunsubscribe(channel);
    expect(received).toEqual(['instance-7']);
  });

  /** Commands Redis ran so far, the script calls themselves and this test's own bookkeeping left out. */
  const commandsRun = async () => {
    const stats = await redis.info('commandstats');
    let calls = 0;
    for (const [, command, n] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      if (!['evalsha', 'eval', 'info', 'config', 'script'].includes(command!)) calls += Number(n);
    }
    return calls;
  };

  it("takes and releases locks nobody else wants with the order path's scripts in at most 8 Redis commands each", async () => {
    // The order path's batches: every segment's attempt in one lockTryMany call, every release in one lockReleaseMany.
    const names = [lockName(), lockName(), lockName()];
    const tryMany = (owner: string) =>
      redis.lockTryMany(
        names.length * 3,
        ...names.flatMap((name) => redisKeys.scriptKeys(name).slice(0, 3)),
        ...names.map(() => owner),
        10_000,
      );
    const releaseMany = (owner: string) =>
      redis.lockReleaseMany(
        names.length * 4,
        ...names.flatMap((name) => redisKeys.scriptKeys(name)),
        ...names.flatMap((name) => [owner, redisKeys.releasedChannel(name), redisKeys.grantedChannel(name)]),
        10_000,
        'n',
      );
    await tryMany('warm-up');
    await releaseMany('warm-up');
    const before = await commandsRun();
    const taken = await tryMany('a');
    expect(taken.filter((_, i) => i % 2 === 0).every((fence) => fence > 0)).toBe(true);
    expect(await releaseMany('a')).toEqual(names.flatMap(() => [0, 0, 0]));
    expect((await commandsRun()) - before).toBeLessThanOrEqual(8 * names.length);
  });

  it('takes and releases a lock nobody else wants with the single-lock scripts in at most 8 Redis commands', async () => {
    const name = lockName();
    // Loads the scripts (a first EVALSHA of an unknown script falls back to EVAL) before counting.
    await acquire(name, 'warm-up');
    await release(name, 'warm-up');
    const before = await commandsRun();
    await acquire(name, 'a');
    await release(name, 'a');
    expect((await commandsRun()) - before).toBeLessThanOrEqual(8);
  });

  it('takes a held lock again under a new token in at most 6 commands, unless another owner tried to take it', async () => {
    const retake = (name: string, owner: string) =>
      redis.lockRetakeMany(3, ...redisKeys.scriptKeys(name).slice(0, 3), owner, 10_000);
    const [name, contended] = [lockName(), lockName()];
    const [first] = await acquire(name, 'a');
    await retake(name, 'a'); // loads the script before counting
    const before = await commandsRun();
    const [fence, previous] = await retake(name, 'a');
    expect((await commandsRun()) - before).toBeLessThanOrEqual(6);
    expect(fence).toBeGreaterThan(first);
    expect(previous).toBeLessThan(fence!);
    expect(await retake(name, 'b')).toEqual([LockCode.Lost, 0]);
    expect((await acquire(name, 'b'))[0]).toBe(LockCode.Busy);
    expect(await release(name, 'a')).toEqual([0, 1]);

    await acquire(contended, 'a');
    expect((await acquire(contended, 'b'))[0]).toBe(LockCode.Busy);
    // Another owner wants it: the holder keeps it as it is, to release it (which tells the other owner).
    expect(await retake(contended, 'a')).toEqual([LockCode.Busy, 0]);
    expect(await release(contended, 'a')).toEqual([0, 1]);
    expect((await acquire(contended, 'b'))[0]).toBeGreaterThan(fence!);
  });

  it('hands a freed lock to the head of the fair queue, with a new token, instead of freeing it', async () => {
    const name = lockName();
    const [first] = await acquire(name, 'holder');
    expect((await acquire(name, 'queued', 10_000, 'queue'))[0]).toBe(LockCode.Busy);
    // A newcomer does not overtake the queue, even once the lock is free.
    const handed = await release(name, 'holder');
    expect(handed[0]).toBe(0);
    expect(handed[1]).toBe('queued');
    expect(handed[2]).toBeGreaterThan(first);
    expect((await acquire(name, 'newcomer'))[0]).toBe(LockCode.Busy);
    expect(await acquire(name, 'queued', 10_000, 'poll')).toEqual([handed[2], 1, 0, handed[2]]);
  });

  it('drops a fair waiter that stopped polling from the queue', async () => {
    const name = lockName();
    await acquire(name, 'holder');
    await redis.lockAcquire(
      ...redisKeys.scriptKeys(name),
      'ghost',
      10_000,
      'queue',
      50,
      redisKeys.grantedChannel(name),
    );
    await acquire(name, 'alive', 10_000, 'queue');
    await sleep(80);
    expect((await release(name, 'holder'))[1]).toBe('alive');
  });

  it('reserves tokens for hand-offs within the holding process, and takes back the unused ones on release', async () => {
    const name = lockName();
    const [first, , , last] = await redis.lockAcquire(
      ...redisKeys.scriptKeys(name),
      'a',
      10_000,
      'try',
      3_000,
      redisKeys.grantedChannel(name),
      5,
    );
    expect(last).toBe(first + 4);
    expect(Number(await redis.get(redisKeys.fence(name)))).toBe(first + 4);
    // The holder passed the lock on twice (first + 1, first + 2), then frees it: the counter goes back to first + 2.
    await redis.lockRelease(
      ...redisKeys.scriptKeys(name),
      'a',
      10_000,
      redisKeys.releasedChannel(name),
      'n',
      redisKeys.grantedChannel(name),
      '0',
      first + 2,
    );
    const [next, , previous] = await acquire(name, 'b');
    expect(previous).toBe(first + 2);
    expect(next).toBeGreaterThan(first + 2);
  });

  it('keeps tokens rising when the counter is lost, as after a Redis restart without persistence', async () => {
    const name = lockName();
    const [before] = await acquire(name, 'a');
    await redis.del(redisKeys.lock(name), redisKeys.fence(name));
    const [after] = await acquire(name, 'b');
    expect(after).toBeGreaterThan(before);
  });
});
