import { readdirSync, readFileSync } from 'node:fs';
import type { Result } from 'ioredis';
import type { RedisClient } from '../redis/connections.js';
import { redisKeys } from './keys.js';

const luaFolder = new URL('./lua/', import.meta.url);

/**
 * The lock's outcomes, in the words every layer uses: an attempt is *taken* (a new hold and token) or *busy*; a release,
 * renewal or retake by a caller that no longer holds the lock finds it *lost* and changes nothing; a write the data
 * store refuses because a newer token wrote first is *fenced out* (FencedOutError). Every other number is a token or a count.
 */
export enum LockCode {
  Busy = -1,
  Lost = -2,
}

// Each command's arguments are listed at the top of its script (lua/<name>-<keys>.lua); `-N` scripts take numkeys first.
declare module 'ioredis' {
  interface RedisCommander<Context> {
    lockAcquire(...keysThenArgs: (string | number)[]): Result<[number, number, number?, number?], Context>;
    lockRelease(
      ...keysThenArgs: (string | number)[]
    ): Result<[number] | [number, number] | [number, string, number], Context>;
    lockTryMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<number[], Context>;
    lockReleaseMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<(number | string)[], Context>;
    lockRetakeMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<number[], Context>;
    lockExtend(lock: string, owner: string, leaseMs: number): Result<number, Context>;
    lockRaiseFence(lock: string, fence: string, owner: string, token: string): Result<number, Context>;
  }
}

/**
 * `--@include name` lines are replaced by lua/include/<name>.lua, itself with its includes, each once per script: code
 * shared between scripts is written once.
 */
function withIncludes(lua: string, included = new Set<string>()): string {
  return lua.replace(/^--@include ([\w-]+)$/gm, (_, name: string) => {
    if (included.has(name)) return '';
    included.add(name);
    return withIncludes(readFileSync(new URL(`include/${name}.lua`, luaFolder), 'utf8'), included);
  });
}

// `-N`: the caller passes the number of keys first (a script over any number of locks).
const scripts = readdirSync(luaFolder).flatMap((file) => {
  const [, name, keys] = /^(\w+)-(\d+|N)\.lua$/.exec(file) ?? [];
  const lua = name ? withIncludes(readFileSync(new URL(file, luaFolder), 'utf8')) : '';
  return name ? [{ name, numberOfKeys: keys === 'N' ? undefined : Number(keys), lua }] : [];
});

/**
 * Registers every `<name>-<numberOfKeys | N>.lua` script as a command on the connection, once. ioredis sends EVALSHA and
 * falls back to EVAL when a restarted Redis no longer has the script.
 */
export function defineLockCommands(redis: RedisClient): void {
  if (typeof (redis as Partial<RedisClient>).lockAcquire === 'function') return;
  for (const { name, numberOfKeys, lua } of scripts) redis.defineCommand(name, { numberOfKeys, lua });
}

/** `lockAcquire` at the lock named `key`, with its keys and hand-off channel. */
export function acquireLock(
  redis: Pick<RedisClient, 'lockAcquire'>,
  key: string,
  owner: string,
  options: { leaseMs: number; mode: 'try' | 'queue' | 'poll'; waiterLeaseMs?: number; reserve?: number },
) {
  const { leaseMs, mode, waiterLeaseMs = 0, reserve = 1 } = options;
  const args = [owner, leaseMs, mode, waiterLeaseMs, redisKeys.grantedChannel(key), reserve];
  return redis.lockAcquire(...redisKeys.scriptKeys(key), ...args);
}

/** `lockRelease` of the lock named `key`, with its keys and channels; `notice` is the release notice's payload. */
export function releaseLock(
  redis: Pick<RedisClient, 'lockRelease'>,
  key: string,
  owner: string,
  options: { handOffLeaseMs: number; notice: string; dropAll: boolean; lastUsed?: number },
) {
  const { handOffLeaseMs, notice, dropAll, lastUsed = 0 } = options;
  const channels = [redisKeys.releasedChannel(key), notice, redisKeys.grantedChannel(key)];
  const args = [owner, handOffLeaseMs, ...channels, dropAll ? '1' : '0', lastUsed];
  return redis.lockRelease(...redisKeys.scriptKeys(key), ...args);
}
