import { readdirSync, readFileSync } from 'node:fs';
import type { Result } from 'ioredis';
import type { RedisClient } from '../redis/connections.js';

const luaFolder = new URL('./lua/', import.meta.url);

/**
 * The lock's outcomes, in the words every layer of it uses. An attempt is *taken* (a new hold, with its fencing token)
 * or *busy* (another owner holds the lock, or is in line for it first). A release, renewal or retake by a caller that no
 * longer holds the lock finds it *lost* (it expired or was taken over) and changes nothing. A write the data store
 * refuses because a newer token wrote first is *fenced* (FencedOutError). The scripts answer busy and lost with these
 * codes; every other number they answer is a token or a count.
 */
export enum LockCode {
  Busy = -1,
  Lost = -2,
}

declare module 'ioredis' {
  interface RedisCommander<Context> {
    lockAcquire(
      lock: string,
      fence: string,
      queue: string,
      queueDeadlines: string,
      owner: string,
      leaseMs: number,
      mode: 'try' | 'queue' | 'poll',
      waiterLeaseMs: number,
      grantedChannel: string,
      reserveTokens?: number,
    ): Result<[number, number, number?, number?], Context>;
    lockRelease(
      lock: string,
      fence: string,
      queue: string,
      queueDeadlines: string,
      owner: string,
      handOffLeaseMs: number,
      releasedChannel: string,
      releaseNotice: string,
      grantedChannel: string,
      dropAll: '0' | '1',
      lastTokenUsed?: number,
    ): Result<[number] | [number, number] | [number, string, number], Context>;
    /** `lockTryMany-N.lua`: numkeys first, then 3 keys per lock, an owner per lock, the lease. Two numbers per lock. */
    lockTryMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<number[], Context>;
    /**
     * `lockReleaseMany-N.lua`: numkeys first, then 4 keys per lock, an owner and two channels per lock, the hand-off
     * lease, the notice. Three values per lock.
     */
    lockReleaseMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<(number | string)[], Context>;
    /** `lockRetakeMany-N.lua`: numkeys first, 3 keys per lock, an owner per lock, the lease. Two numbers per lock. */
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
  const match = /^(\w+)-(\d+|N)\.lua$/.exec(file);
  if (!match) return [];
  return [
    {
      name: match[1]!,
      numberOfKeys: match[2] === 'N' ? undefined : Number(match[2]),
      lua: withIncludes(readFileSync(new URL(file, luaFolder), 'utf8')),
    },
  ];
});

/**
 * Registers every `<name>-<numberOfKeys | N>.lua` script as a command on the connection, once. ioredis sends EVALSHA and
 * falls back to EVAL when a restarted Redis no longer has the script.
 */
export function defineLockCommands(redis: RedisClient): void {
  if (typeof (redis as Partial<RedisClient>).lockAcquire === 'function') return;
  for (const { name, numberOfKeys, lua } of scripts) redis.defineCommand(name, { numberOfKeys, lua });
}
