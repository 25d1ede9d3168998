import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from '../../../src/dev/free-port.js';
import { RedisServer } from '../../../src/dev/servers/redis.js';
import { MissingDependencyError, type StopMode } from '../../../src/dev/servers/server-process.js';
import { waitFor } from '../wait-for.js';

export interface RedisClusterOptions {
  /** Primaries, each owning an equal share of the 16,384 slots (default 3). */
  primaries?: number;
  /** Replicas per primary (default 1). */
  replicasPerPrimary?: number;
  /**
   * cluster-node-timeout: how long a primary may be unreachable before its replica is promoted (default 5,000 ms,
   * Redis's default is 15,000). Failover tests lower it; too low on a busy machine fails over primaries that are
   * merely slow.
   */
  nodeTimeoutMs?: number;
  /** What `stop()` of a single node does when not told (a fault case kills nodes: `immediate`). */
  stopMode?: StopMode;
}

const READY_WITHIN_MS = 60_000;

/**
 * A Redis Cluster on loopback: primaries and their replicas, each a RedisServer (`--cluster-enabled yes`) on a free
 * port with its cluster bus on another free port (the default, port + 10,000, may be taken or out of range), joined
 * by `redis-cli --cluster create`. `start()` returns once every node sees every slot covered and every replica is in
 * sync with its primary, so a failover can promote it at once. `destroy()` stops every node and removes their files.
 */
export class RedisCluster {
  private constructor(readonly nodes: readonly RedisServer[]) {}

  static async start(options: RedisClusterOptions = {}): Promise<RedisCluster> {
    if (spawnSync('redis-cli', ['--version']).error) {
      throw new MissingDependencyError('redis-cli was not found on PATH (Debian/Ubuntu: apt-get install redis-tools)');
    }
    const primaries = options.primaries ?? 3;
    const replicas = options.replicasPerPrimary ?? 1;
    const startNode = async () =>
      RedisServer.start({
        stopMode: options.stopMode ?? 'graceful',
        extraArgs: [
          ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf'],
          ...['--cluster-port', String(await freePort())],
          ...['--cluster-node-timeout', String(options.nodeTimeoutMs ?? 5_000)],
        ],
      });
    const started = await Promise.allSettled(
      Array.from({ length: primaries * (1 + replicas) }, () => onFreshPorts(startNode)),
    );
    const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    const cluster = new RedisCluster(nodes);
    try {
      const failed = started.find((result) => result.status === 'rejected');
      if (failed) throw failed.reason;
      await promisify(execFile)('redis-cli', [
        ...['--cluster', 'create', ...nodes.map((node) => `127.0.0.1:${node.port}`)],
        ...['--cluster-replicas', String(replicas), '--cluster-yes'],
      ]);
      if ((await waitFor(() => cluster.settled(), READY_WITHIN_MS, 100)) === Infinity) {
        throw new Error(`the Redis Cluster on ${cluster.seeds} did not settle within 60 s`);
      }
      return cluster;
    } catch (error) {
      await cluster.destroy();
      throw error;
    }
  }

  /** Every node's address, `host:port,…`: REDIS_CLUSTER_NODES. */
  get seeds(): string {
    return this.nodes.map((node) => `127.0.0.1:${node.port}`).join(',');
  }

  /** The nodes that are primaries now, by asking a node that answers (a failover changes the answer). */
  async primaries(): Promise<RedisServer[]> {
    const lines = await this.ask((redis) => redis.call('CLUSTER', 'NODES') as Promise<string>);
    const ports = new Set(
      lines
        .split('\n')
        .filter((line) => / (myself,)?master /.test(line) && !line.includes('fail'))
        .map((line) => Number(/:(\d+)@/.exec(line)![1])),
    );
    return this.nodes.filter((node) => ports.has(node.port));
  }

  /** The node that serves `slot` now. */
  async primaryOfSlot(slot: number): Promise<RedisServer> {
    const ranges = await this.ask(
      (redis) => redis.call('CLUSTER', 'SLOTS') as Promise<[number, number, [string, number]][]>,
    );
    const range = ranges.find(([from, to]) => slot >= from && slot <= to);
    if (!range) throw new Error(`no node serves slot ${slot}`);
    return this.nodes.find((node) => node.port === Number(range[2][1]))!;
  }

  /**
   * True once every running node reports the cluster ok and knows its peers, and every replica's link to its primary
   * is up: the state `start()` waits for, and a failover case waits for again afterwards.
   */
  async settled(): Promise<boolean> {
    const running = await Promise.all(
      this.nodes.map((node) =>
        probe(node.port, async (redis) => {
          const info = (await redis.call('CLUSTER', 'INFO')) as string;
          const replication = await redis.info('replication');
          const ok = info.includes('cluster_state:ok') && info.includes('cluster_slots_assigned:16384');
          const synced = replication.includes('role:master') || replication.includes('master_link_status:up');
          return ok && synced;
        }),
      ),
    );
    return running.every((answer) => answer !== false);
  }

  async destroy(): Promise<void> {
    await Promise.allSettled(this.nodes.map((node) => node.destroy()));
  }

  /** Asks the first node that answers. */
  private async ask<T>(question: (redis: Redis) => Promise<T>): Promise<T> {
    for (const node of this.nodes) {
      const answer = await probe(node.port, question);
      if (answer !== undefined) return answer;
    }
    throw new Error(`no node of the Redis Cluster on ${this.seeds} answers`);
  }
}

/**
 * A port free a moment ago may be taken by the time the server binds it: by the tests running beside, whose outgoing
 * connections take ports from the same range. Such a node is started again on other ports.
 */
async function onFreshPorts(start: () => Promise<RedisServer>): Promise<RedisServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (error) {
      if (attempt >= 3 || !String(error).includes('Address already in use')) throw error;
    }
  }
}

/** One short-lived connection to a node; undefined when the node does not answer (stopped, or killed by a case). */
async function probe<T>(port: number, question: (redis: Redis) => Promise<T>): Promise<T | undefined> {
  const redis = new Redis(port, '127.0.0.1', {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1_000,
  });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await question(redis);
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}
