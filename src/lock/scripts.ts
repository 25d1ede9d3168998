import { readdirSync, readFileSync } from 'node:fs';
import type { Redis, Result } from 'ioredis';

const luaFolder = new URL('./lua/', import.meta.url);

/** Result codes the scripts return besides a token. */
export enum ScriptResult {
  LockHeld = -1,
  NotOwner = 0,
  Done = 1,
}

declare module 'ioredis' {
  interface RedisCommander<Context> {
    acquireLock(
      lockKey: string,
      fenceKey: string,
      owner: string,
      leaseMs: number,
    ): Result<number | [number, number], Context>;
    releaseLock(lockKey: string, owner: string, channel: string, notice: string): Result<number, Context>;
    extendLock(lockKey: string, owner: string, leaseMs: number): Result<number, Context>;
  }
}

/**
 * Registers every `<name>-<numberOfKeys>.lua` script as a command on the connection. ioredis sends EVALSHA and falls
 * back to EVAL when a restarted Redis no longer has the script.
 */
export function defineLockCommands(redis: Redis): void {
  for (const file of readdirSync(luaFolder)) {
    const match = /^(\w+)-(\d+)\.lua$/.exec(file);
    if (!match) continue;
    const [, name, keys] = match;
    redis.defineCommand(name!, {
      numberOfKeys: Number(keys),
      lua: readFileSync(new URL(file, luaFolder), 'utf8'),
    });
  }
}
