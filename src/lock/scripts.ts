import { readdirSync, readFileSync } from 'node:fs';
import type { Result } from 'ioredis';
import type { RedisClient } from '../redis/connections.js';

const luaFolder = new URL('./lua/', import.meta.url);

/** What the lock scripts answer besides tokens and counts. */
export enum LockCode {
  /** Held by another owner. */
  Held = -1,
  /** The caller does not own the lock (expired, taken over, never held): nothing was changed. */
  NotOwner = -2,
  /** The many-locks scripts: this lock needs the single-lock script's full path (a fair queue, a contended hold). */
  AskAlone = -3,
}

export type ScriptOutcome = 'done' | 'held' | 'not-owner' | 'ask-alone';

/** The one place a script's leading code becomes an outcome: any other number (a token, a count, 0, 1) is 'done'. */
export function outcomeOf(code: number): ScriptOutcome {
  if (code === LockCode.Held) return 'held';
  if (code === LockCode.NotOwner) return 'not-owner';
  if (code === LockCode.AskAlone) return 'ask-alone';
  return 'done';
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
    /** `lockReleaseMany-N.lua`: numkeys first, then 2 keys per lock, an owner per lock. One number per lock. */
    lockReleaseMany(numberOfKeys: number, ...keysThenArgs: string[]): Result<number[], Context>;
    /** `lockRetakeMany-N.lua`: numkeys first, 3 keys per lock, an owner per lock, the lease. Two numbers per lock. */
    lockRetakeMany(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<number[], Context>;
    lockExtend(lock: string, owner: string, leaseMs: number): Result<number, Context>;
    lockRaiseFence(lock: string, fence: string, owner: string, token: string): Result<number, Context>;
  }
}

/** `--@include name` lines are replaced by lua/include/<name>.lua: code shared between scripts is written once. */
function withIncludes(lua: string): string {
  return lua.replace(/^--@include ([\w-]+)$/gm, (_, name: string) =>
    readFileSync(new URL(`include/${name}.lua`, luaFolder), 'utf8'),
  );
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
