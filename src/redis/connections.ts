import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { Config } from '../config.js';

/** A connection to one Redis (directly or through Sentinel) or to a Redis Cluster: every caller works with either. */
export type RedisClient = Redis | Cluster;

/** Where the service's Redis is: one server, a primary found through Sentinels, or a cluster. */
export type RedisTopology =
  | { kind: 'standalone'; url: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; password: string | undefined }
  | { kind: 'cluster'; nodes: HostPort[]; password: string | undefined };

export interface HostPort {
  host: string;
  port: number;
}

/**
 * The topology the configuration names: REDIS_CLUSTER_NODES, REDIS_SENTINELS (+ REDIS_SENTINEL_NAME), or a single
 * URL: REDIS_URL, or `embeddedUrl`, the private redis-server started when none of the three is set.
 */
export function redisTopology(
  config: Pick<Config, 'redisUrl' | 'redisClusterNodes' | 'redisSentinels' | 'redisSentinelName' | 'redisPassword'>,
  embeddedUrl?: string,
): RedisTopology {
  if (config.redisClusterNodes.length > 0) {
    return { kind: 'cluster', nodes: config.redisClusterNodes.map(parseHostPort), password: config.redisPassword };
  }
  if (config.redisSentinels.length > 0) {
    return {
      kind: 'sentinel',
      sentinels: config.redisSentinels.map(parseHostPort),
      name: config.redisSentinelName!,
      password: config.redisPassword,
    };
  }
  const url = config.redisUrl ?? embeddedUrl;
  if (!url) throw new Error('no Redis: set REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS');
  return { kind: 'standalone', url };
}

/** True when the configuration names a Redis of its own, so that no embedded redis-server is needed. */
export function redisConfigured(config: Pick<Config, 'redisUrl' | 'redisClusterNodes' | 'redisSentinels'>): boolean {
  return !!config.redisUrl || config.redisClusterNodes.length > 0 || config.redisSentinels.length > 0;
}

function parseHostPort(node: string): HostPort {
  const at = node.lastIndexOf(':');
  return { host: node.slice(0, at), port: Number(node.slice(at + 1)) };
}

/**
 * The service's two Redis connections: `commands` for commands, scripts and SPUBLISH, and `subscriber` for
 * SSUBSCRIBE. Notices use sharded pub/sub everywhere (Redis 7): on a cluster a notice then travels only within the
 * shard that owns its channel's slot, next to the lock it speaks of, instead of being broadcast over the cluster bus
 * to every node; on one server it behaves like plain pub/sub.
 */
export interface RedisConnections {
  readonly commands: RedisClient;
  readonly subscriber: RedisClient;
  /**
   * Runs `listener` whenever the subscriber's subscriptions are back after a drop (a reconnect, a failover, a slot
   * that moved): notices published meanwhile were missed.
   */
  onResubscribed(listener: () => void): void;
  connect(): Promise<void>;
  close(): Promise<void>;
}

/** How often a cluster client asks for the slot map unprompted, so that a failover is noticed within seconds. */
const CLUSTER_SLOTS_REFRESH_MS = 2_000;

/**
 * Builds the service's connections for `topology`: the one place that knows how to reach each kind of Redis.
 *
 * The command connection fails fast while Redis is away (no offline queue, one retry), so that orders answer 503
 * rather than queue behind a reconnect. The subscriber queues its subscriptions until it is connected and makes
 * them again after every reconnect; on a cluster it keeps one connection per primary (ioredis's sharded
 * subscribers), which follows slot moves and failovers.
 */
export function createRedisConnections(
  topology: RedisTopology,
  onError: (error: Error) => void = () => {},
): RedisConnections {
  const connections = build(topology);
  for (const connection of [connections.commands, connections.subscriber]) connection.on('error', onError);
  return connections;
}

function build(topology: RedisTopology): RedisConnections {
  // Each command leaves at once. A batch's lock attempts, and its releases, are one script call on one server anyway;
  // ioredis's auto-pipelining would hold every command back to the end of the event loop's turn and build a pipeline
  // for each flush, which cost the order path more time and CPU than the writes it saved.
  const failFast = { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true } satisfies RedisOptions;
  if (topology.kind === 'cluster') {
    const common: ClusterOptions = {
      lazyConnect: true,
      slotsRefreshInterval: CLUSTER_SLOTS_REFRESH_MS,
      // Node connections connect on first use: an offline queue there only holds that first command.
      redisOptions: { password: topology.password, maxRetriesPerRequest: 1 },
    };
    // No auto-pipelining here either, and not only for speed: a pipeline that meets a slot moved by a failover fails
    // with MOVED instead of following it, where a single command is redirected.
    const commands = new Cluster(topology.nodes, { ...common, enableOfflineQueue: false });
    const subscriber = new Cluster(topology.nodes, { ...common, shardedSubscribers: true });
    return wrap(commands, subscriber, (listener) => subscriber.on('subscribersReady', listener));
  }
  const subscriberOptions: RedisOptions = { lazyConnect: true };
  if (topology.kind === 'sentinel') {
    const sentinel: RedisOptions = {
      sentinels: topology.sentinels,
      name: topology.name,
      password: topology.password,
      // Sentinel tells of a new primary at once, rather than when the old one stops answering.
      failoverDetector: true,
      // A primary demoted by a failover answers writes with READONLY: reconnect, which asks Sentinel anew.
      reconnectOnError: (error) => error.message.startsWith('READONLY'),
    };
    const commands = new Redis({ ...sentinel, ...failFast });
    const subscriber = new Redis({ ...sentinel, ...subscriberOptions });
    return wrap(commands, subscriber, (listener) => subscriber.on('ready', listener));
  }
  const commands = new Redis(topology.url, failFast);
  const subscriber = new Redis(topology.url, subscriberOptions);
  return wrap(commands, subscriber, (listener) => subscriber.on('ready', listener));
}

function wrap(
  commands: RedisClient,
  subscriber: RedisClient,
  onResubscribed: (listener: () => void) => void,
): RedisConnections {
  let closing = false;
  // A connection that ends for good (ioredis gave up reconnecting: seen after a Sentinel failover, when a reconnect
  // raced the switch to the new primary) would leave the instance unready until restarted: start it again.
  for (const client of [commands, subscriber]) {
    client.on('end', () => {
      if (closing) return;
      setTimeout(() => {
        if (!closing && client.status === 'end') client.connect().catch(() => {});
      }, RECONNECT_AFTER_END_MS).unref();
    });
  }
  return {
    commands,
    subscriber,
    onResubscribed,
    async connect() {
      await Promise.all([commands.connect(), subscriber.connect()]);
    },
    async close() {
      closing = true;
      subscriber.disconnect();
      await commands.quit().catch(() => commands.disconnect());
    },
  };
}

/** How long after a connection ended for good it is started again. */
const RECONNECT_AFTER_END_MS = 500;

/**
 * A subscriber connection to the same Redis as `client`, for a component given only a command connection (the lock
 * library used on its own): it connects when first used.
 */
export function duplicateSubscriber(client: RedisClient): RedisClient {
  if (client instanceof Cluster)
    return client.duplicate([], { lazyConnect: true, enableOfflineQueue: true, shardedSubscribers: true });
  return client.duplicate({ lazyConnect: true, enableOfflineQueue: true });
}
