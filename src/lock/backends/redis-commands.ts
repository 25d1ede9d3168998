import type { Redis, Result } from 'ioredis';
import { defineLockCommands } from '../scripts.js';

/** Typed signatures of the reentrant-lock scripts (src/lock/lua/lock*.lua). */
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
      grantChannel: string,
      name: string,
      reserveTokens?: number,
    ): Result<[number, number, number?], Context>;
    lockRelease(
      lock: string,
      fence: string,
      queue: string,
      queueDeadlines: string,
      owner: string,
      handOffLeaseMs: number,
      releaseChannel: string,
      releaseMessage: string,
      grantChannel: string,
      name: string,
      dropAll: '0' | '1',
    ): Result<[number] | [number, number] | [number, string, number], Context>;
    lockExtend(lock: string, owner: string, leaseMs: number): Result<number, Context>;
    lockRaiseFence(lock: string, fence: string, owner: string, token: string): Result<number, Context>;
  }
}

/** Result codes of the reentrant-lock scripts besides tokens and counts. */
export enum LockScriptCode {
  Held = -1,
  NotOwner = -2,
  Released = 0,
  Done = 1,
}

/** Registers the scripts on a connection once (the service's connection already has them). */
export function ensureLockCommands(redis: Redis): void {
  if (typeof (redis as Partial<Redis>).lockAcquire !== 'function') defineLockCommands(redis);
}
