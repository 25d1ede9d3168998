import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../../src/dev/free-port.js';
import { RedisServer } from '../../../src/dev/servers/redis.js';
import { ChildServer, LoopbackServer, type StopMode, serverDir } from '../../../src/dev/servers/server-process.js';
import { waitFor } from '../wait-for.js';

export interface RedisSentinelOptions {
  /** The name Sentinel monitors the primary under (REDIS_SENTINEL_NAME; default `stock`). */
  name?: string;
  /** How long the primary may be silent before Sentinel counts it down and fails over (default 5,000 ms). */
  downAfterMs?: number;
  /** What `stop()` of the primary or the replica does when not told (a fault case kills them: `immediate`). */
  stopMode?: StopMode;
}

const READY_WITHIN_MS = 60_000;

/**
 * A primary, one replica and one Sentinel on loopback (`redis-server --sentinel` with a config file of its own, which
 * Sentinel rewrites as it learns). `start()` returns once the replica is in sync and Sentinel knows it, so a failover
 * can promote it at once. One Sentinel with a quorum of 1 decides alone: enough for tests, not for production.
 */
export class RedisSentinelGroup {
  private constructor(
    readonly name: string,
    readonly primary: RedisServer,
    readonly replica: RedisServer,
    readonly sentinel: SentinelServer,
  ) {}

  static async start(options: RedisSentinelOptions = {}): Promise<RedisSentinelGroup> {
    const name = options.name ?? 'stock';
    const stopMode = options.stopMode ?? 'graceful';
    const started: { destroy(): Promise<void> }[] = [];
    try {
      const primary = await RedisServer.start({ stopMode });
      started.push(primary);
      const replica = await RedisServer.start({
        stopMode,
        extraArgs: ['--replicaof', '127.0.0.1', String(primary.port)],
      });
      started.push(replica);
      if (
        (await waitFor(async () => /master_link_status:up/.test(await info(replica.port)), READY_WITHIN_MS, 100)) ===
        Infinity
      ) {
        throw new Error('the replica did not sync with the primary within 60 s');
      }
      const sentinel = await SentinelServer.start(name, primary.port, options.downAfterMs ?? 5_000);
      started.push(sentinel);
      const group = new RedisSentinelGroup(name, primary, replica, sentinel);
      if ((await waitFor(() => group.replicaKnown(), READY_WITHIN_MS, 100)) === Infinity) {
        throw new Error('Sentinel did not discover the replica within 60 s');
      }
      return group;
    } catch (error) {
      await Promise.allSettled(started.map((server) => server.destroy()));
      throw error;
    }
  }

  /** REDIS_SENTINELS. */
  get sentinels(): string {
    return `127.0.0.1:${this.sentinel.port}`;
  }

  /** The port of the node Sentinel names as the primary now. */
  async primaryPort(): Promise<number> {
    const [, port] = (await this.sentinel.ask(['GET-MASTER-ADDR-BY-NAME', this.name])) as [string, string];
    return Number(port);
  }

  /** Asks Sentinel to fail over now, without waiting for the primary to be found down. */
  async failover(): Promise<void> {
    await this.sentinel.ask(['FAILOVER', this.name]);
  }

  async destroy(): Promise<void> {
    await Promise.allSettled([this.sentinel.destroy(), this.primary.destroy(), this.replica.destroy()]);
  }

  private async replicaKnown(): Promise<boolean> {
    const replicas = (await this.sentinel.ask(['REPLICAS', this.name])) as string[][];
    return replicas.some((fields) => {
      const at = (key: string) => fields[fields.indexOf(key) + 1];
      return at('flags') === 'slave' && at('master-link-status') === 'ok';
    });
  }
}

/** A Sentinel process: redis-server in Sentinel mode, monitoring one primary. */
export class SentinelServer extends LoopbackServer {
  private process: ChildServer | undefined;

  private constructor(
    port: number,
    dir: string,
    private readonly config: string,
  ) {
    super(port, dir, true, 'graceful');
  }

  static async start(name: string, primaryPort: number, downAfterMs: number): Promise<SentinelServer> {
    const { dir } = serverDir(undefined, 'sentinel');
    const port = await freePort();
    const config = [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 1`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} ${Math.max(downAfterMs * 2, 5_000)}`,
    ].join('\n');
    const server = new SentinelServer(port, dir, config);
    try {
      await server.resume();
    } catch (error) {
      await server.abandon();
      throw error;
    }
    return server;
  }

  async resume(): Promise<void> {
    if (this.process?.running) throw new Error(`Sentinel on port ${this.port} is already running`);
    // Sentinel rewrites its configuration file as it learns; each start begins from what it was given.
    const file = path.join(this.dir, 'sentinel.conf');
    writeFileSync(file, `${this.config}\n`);
    this.process = await ChildServer.spawn('redis-sentinel', 'redis-server', [file, '--sentinel'], {
      output: '+monitor master',
    });
  }

  /** One SENTINEL subcommand. */
  async ask(args: string[]): Promise<unknown> {
    const redis = new Redis(this.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
    redis.on('error', () => {});
    try {
      return await redis.call('SENTINEL', ...args);
    } finally {
      redis.disconnect();
    }
  }

  protected async halt(mode: StopMode): Promise<void> {
    const child = this.process;
    this.process = undefined;
    await child?.stop(mode === 'graceful' ? 'SIGTERM' : 'SIGKILL');
  }
}

async function info(port: number): Promise<string> {
  const redis = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  try {
    return await redis.info('replication');
  } catch {
    return '';
  } finally {
    redis.disconnect();
  }
}
