/** The lock alone: workers acquire → hold H ms → release on K keys; this lock against libraries, or per backend. */
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import Redlock from 'redlock';
import { PostgresLock } from '../../src/lock/backends/postgres.js';
import { RedisLock } from '../../src/lock/backends/redis.js';
import { RedlockLock } from '../../src/lock/backends/redlock.js';
import { ZooKeeperLock } from '../../src/lock/backends/zookeeper.js';
import type { DistributedLock, LockBackendKind } from '../../src/lock/distributed-lock.js';
import type { RunContext } from './context.js';

const LEASE_MS = 10_000; // No section outlives its lease, as in the libraries' own examples.
const WAIT_MS = 600_000; // Nobody gives up waiting: waiting is what is measured.
const runId = Date.now().toString(36); // Keys of this run, apart from any earlier run's on the same servers.

/** Acquire (waiting as long as it takes, or until `stop`), answering the release. */
type Contender = {
  acquire(key: string, stop: AbortSignal): Promise<() => Promise<unknown>>;
  close(): Promise<unknown>;
};
export type LockCell = Awaited<ReturnType<typeof runCell>>;

const lockContender = (lock: DistributedLock, key: (k: string) => string, fair: boolean): Contender => ({
  acquire: (k, signal) =>
    lock.acquire(key(k), { fair, waitMs: WAIT_MS, signal }).then((lease) => () => lock.release(lease)),
  close: () => lock.close(),
});

/** A library with its own connection and default waiting, or (`backend:<kind>`) this lock on that backend. */
async function openContender({ backing }: RunContext, name: string): Promise<Contender> {
  // Its errors are the failed acquisitions the cell counts; a run stopped mid-cell (SIGTERM) stops the server under it,
  // and the reset that follows must not surface as an unhandled error event.
  const connect = async () => new Redis((await backing.lockRedis()).url).on('error', () => {});
  const backends: Record<LockBackendKind, () => Promise<DistributedLock>> = {
    redis: async () => new RedisLock({ redis: await connect(), ownsConnection: true }),
    redlock: async () => new RedlockLock({ urls: await backing.redlockUrls() }),
    postgres: async () => new PostgresLock({ connectionString: backing.databaseUrl, poolSize: 10 }),
    zookeeper: async () =>
      new ZooKeeperLock({ connect: (await backing.zookeeper()).connect, rootPath: `/bench-${runId}` }),
  };
  const kind = name.startsWith('backend:') && (name.slice('backend:'.length) as LockBackendKind);
  if (kind) return lockContender(await backends[kind](), (k) => `${runId}/${k}`, false);
  const redis = await connect();
  const key = (k: string) => `bench:${runId}:${name}:${k}`;
  if (name === 'redlock') {
    // Retries every 200 ms ± 200 ms, its default; but never gives up.
    const redlock = new Redlock([redis], { retryCount: -1 }).on('error', () => {});
    const acquire = (k: string) => redlock.acquire([key(k)], LEASE_MS).then((lock) => () => lock.release());
    return { acquire, close: () => redlock.quit() };
  }
  if (name === 'redis-semaphore') {
    // Retries every 10 ms, its default.
    const acquire = async (k: string, stop: AbortSignal) => {
      const mutex = new Mutex(redis, key(k), { lockTimeout: LEASE_MS, acquireTimeout: WAIT_MS });
      return mutex.acquire(stop).then(() => () => mutex.release());
    };
    return { acquire, close: () => redis.quit() };
  }
  return lockContender(new RedisLock({ redis, ttlMs: LEASE_MS, ownsConnection: true }), key, name === 'this-lock-fair');
}

// Worker w takes key (w + i) mod K on its i-th round: after a release it waits on another key, so a key stays busy only
// if the lock wakes its waiters promptly.
export async function runCell(ctx: RunContext, name: string, keys: number, holdMs: number) {
  const { lockWorkers: workers, lockWarmupSeconds, lockMeasureSeconds } = ctx.settings;
  const cell = { workers, keys, holdMs };
  ctx.progress.note(`K=${keys} H=${holdMs} ms ${name}…`);
  const contender = await openContender(ctx, name);
  const stop = new AbortController();
  setMaxListeners(workers * 2, stop.signal); // Every waiting worker listens to it.
  const windowStart = performance.now() + lockWarmupSeconds * 1000;
  const windowEnd = windowStart + lockMeasureSeconds * 1000;
  const inWindow = (at: number) => at >= windowStart && at < windowEnd;
  const waits: number[] = [];
  const openWaits = new Set<number>();
  const tally = { sections: 0, errors: 0, holds: 0, heldMs: 0 };
  const worker = async (w: number) => {
    for (let round = 0; performance.now() < windowEnd; round++) {
      const askedAt = performance.now();
      openWaits.add(askedAt);
      // A failure once the run is over ends the loop: `stop` fires only after the window.
      const failed = () => void (stop.signal.aborted || tally.errors++);
      const release = await contender.acquire(`k${(w + round) % keys}`, stop.signal).catch(failed);
      openWaits.delete(askedAt);
      if (!release) continue;
      const gotAt = performance.now();
      if (inWindow(askedAt)) waits.push(gotAt - askedAt);
      if (holdMs > 0) await sleep(holdMs);
      tally.heldMs += performance.now() - gotAt;
      tally.holds++;
      await release().catch(() => tally.errors++);
      if (inWindow(performance.now())) tally.sections++;
    }
  };
  const running = Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  await sleep(windowEnd - performance.now());
  // Waits still open at the end count as long as they have lasted: starvation must not hide.
  for (const askedAt of openWaits) if (askedAt >= windowStart) waits.push(performance.now() - askedAt);
  stop.abort(new Error('run over'));
  await Promise.race([running, sleep(30_000)]);
  await contender.close().catch(() => {});
  waits.sort((a, b) => a - b);
  return {
    contender: name,
    ...cell,
    sectionsPerSecond: tally.sections / lockMeasureSeconds, // Critical sections completed in the measured window.
    maxWaitMs: waits.at(-1) ?? 0,
    p99WaitMs: waits[Math.min(waits.length - 1, Math.floor(waits.length * 0.99))] ?? 0,
    /** Time actually spent in a hold (a timer of H ms fires late): the real ceiling is K × 1000 / this. */
    meanHoldMs: tally.holds ? tally.heldMs / tally.holds : 0,
    errors: tally.errors, // Acquisitions that failed for another reason than the end of the run.
  };
}
