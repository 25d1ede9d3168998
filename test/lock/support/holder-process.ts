import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

/** How a child process builds the backend: a compiled module, its class, and JSON options. */
export interface BackendRecipe {
  /** Path from the repository root, e.g. dist/src/lock/backends/redis.js (`npm test` builds first). */
  module: string;
  className: string;
  options: Record<string, unknown>;
  /** When set, `options.redis` becomes an ioredis connection to this URL. */
  redisUrl?: string;
}

/**
 * Code run by the holder: takes the lock, prints its token, then keeps it (watchdog on) until killed. The holder is a
 * separate OS process so that killing it is a real crash: no release, no goodbye to the store.
 */
const HOLDER = `
const spec = JSON.parse(process.env.HOLD_LOCK_SPEC);
const backend = await import(spec.moduleUrl);
const options = { ...spec.options };
if (spec.redisUrl) {
  const { Redis } = await import('ioredis');
  options.redis = new Redis(spec.redisUrl);
}
const lock = new backend[spec.className](options);
const lease = await lock.acquire(spec.key, { ttlMs: spec.ttlMs, waitMs: 10000 });
console.log('held ' + lease.fence);
setInterval(() => {}, 60000);
`;

export class HolderProcess {
  private constructor(
    readonly child: ChildProcess,
    readonly fence: number,
  ) {}

  static async start(recipe: BackendRecipe, key: string, ttlMs: number): Promise<HolderProcess> {
    const spec = {
      moduleUrl: pathToFileURL(path.resolve(recipe.module)).href,
      className: recipe.className,
      options: recipe.options,
      redisUrl: recipe.redisUrl,
      key,
      ttlMs,
    };
    const child = spawn(process.execPath, ['--input-type=module', '-e', HOLDER], {
      env: { ...process.env, HOLD_LOCK_SPEC: JSON.stringify(spec) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output: string[] = [];
    child.stderr!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const fence = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`holder did not take the lock:\n${output.join('')}`)), 20_000);
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const match = /^held (\d+)$/.exec(line);
        if (match) {
          clearTimeout(timer);
          resolve(Number(match[1]));
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`holder exited (${code}):\n${output.join('')}`));
      });
    });
    return new HolderProcess(child, fence);
  }

  /** A crash: SIGKILL, nothing released. */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGKILL');
    await exited;
  }
}
