import path from 'node:path';
import { z } from 'zod';

const port = z.coerce.number().int().min(0).max(65535);
const positiveMs = (max: number) => z.coerce.number().int().min(1).max(max);
const emptyAsUnset = (value: unknown) => (value === '' ? undefined : value);
/** `host:port,host:port…` (blank: unset) as a list of addresses. */
const hostPorts = z.preprocess(
  (value) =>
    typeof value === 'string' && value.trim() !== '' ? value.split(',').map((node) => node.trim()) : undefined,
  z
    .array(z.string().regex(/^[\w.-]+:\d{1,5}$/, 'must be host:port[,host:port…]'))
    .min(1)
    .optional(),
);

const configSchema = z.object({
  PORT: port.default(3000),
  HOST: z.string().min(1).default('127.0.0.1'),
  REDIS_URL: z.preprocess(emptyAsUnset, z.url({ protocol: /^rediss?$/ }).optional()),
  // A Redis Cluster (seed nodes) or a primary watched by Sentinels, instead of REDIS_URL: at most one of the three.
  REDIS_CLUSTER_NODES: hostPorts,
  REDIS_SENTINELS: hostPorts,
  REDIS_SENTINEL_NAME: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  // The password of the cluster's or the Sentinel-watched primary's nodes (a REDIS_URL carries its own).
  REDIS_PASSWORD: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  DATABASE_URL: z.preprocess(emptyAsUnset, z.url({ protocol: /^postgres(ql)?$/ }).optional()),
  ADMIN_TOKEN: z.preprocess(emptyAsUnset, z.string().min(16, 'must be at least 16 characters').optional()),
  // Read-only monitoring (GET /metrics, the dashboard's data) without the power to change stock.
  METRICS_TOKEN: z.preprocess(emptyAsUnset, z.string().min(16, 'must be at least 16 characters').optional()),
  LOCK_TTL_MS: positiveMs(600_000).default(10_000),
  LOCK_WAIT_MS: positiveMs(600_000).default(2_000),
  MAX_ORDER_QUANTITY: z.coerce.number().int().min(1).max(1_000_000_000).default(1000),
  DATA_DIR: z.string().min(1).default('.data'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  PG_POOL_SIZE: z.coerce.number().int().min(1).max(500).default(20),
  // Benchmark knob: a simulated business step held inside the segment lock (0 in production).
  CRITICAL_SECTION_DELAY_MS: z.coerce.number().int().min(0).max(10_000).default(0),
  COMBINE_MAX_BATCH: z.coerce.number().int().min(1).max(1_000).default(64),
  SHUTDOWN_GRACE_MS: positiveMs(600_000).default(10_000),
  // Orders one client may place per minute on one instance; 0 (the default) turns the limit off, as load tests need.
  RATE_LIMIT_ORDERS_PER_MINUTE: z.coerce.number().int().min(0).max(1_000_000).default(0),
  // Proxies in front of the service whose X-Forwarded-For to believe, so the rate limit sees clients, not the proxy.
  TRUST_PROXY_HOPS: z.coerce.number().int().min(0).max(10).default(0),
  // Where the segment locks live (docs/locks.md): the service's Redis, Redlock over REDIS_LOCK_URLS, the service's
  // Postgres, or ZooKeeper at ZOOKEEPER_CONNECT.
  LOCK_BACKEND: z.preprocess(emptyAsUnset, z.enum(['redis', 'redlock', 'postgres', 'zookeeper']).default('redis')),
  REDIS_LOCK_URLS: z.preprocess(
    (value) =>
      typeof value === 'string' && value.trim() !== '' ? value.split(',').map((url) => url.trim()) : undefined,
    z
      .array(z.url({ protocol: /^rediss?$/ }))
      .min(1)
      .optional(),
  ),
  ZOOKEEPER_CONNECT: z.preprocess(
    emptyAsUnset,
    z
      .string()
      .regex(/^[\w.-]+:\d+(,[\w.-]+:\d+)*(\/[\w./-]*)?$/, 'must be host:port[,host:port…][/chroot]')
      .optional(),
  ),
  // Renew held segment locks every LOCK_TTL_MS / 3 while their holder lives; off, a lease simply expires.
  LOCK_WATCHDOG: z.preprocess(emptyAsUnset, z.enum(['0', '1', 'false', 'true']).default('1')),
});

export type Config = Readonly<{
  port: number;
  host: string;
  redisUrl: string | undefined;
  /** Seed nodes of a Redis Cluster (`host:port`); empty when not on a cluster. */
  redisClusterNodes: readonly string[];
  /** Sentinels (`host:port`) watching the primary named `redisSentinelName`; empty when not on Sentinel. */
  redisSentinels: readonly string[];
  redisSentinelName: string | undefined;
  redisPassword: string | undefined;
  databaseUrl: string | undefined;
  adminToken: string | undefined;
  metricsToken: string | undefined;
  lockTtlMs: number;
  lockWaitMs: number;
  maxOrderQuantity: number;
  dataDir: string;
  logLevel: string;
  pgPoolSize: number;
  criticalSectionDelayMs: number;
  /** Most orders one segment holder serves in one statement (flat combining); 1 turns combining off. */
  combineMaxBatch: number;
  shutdownGraceMs: number;
  rateLimitOrdersPerMinute: number;
  trustProxyHops: number;
  lockBackend: 'redis' | 'redlock' | 'postgres' | 'zookeeper';
  redisLockUrls: readonly string[];
  zookeeperConnect: string | undefined;
  lockWatchdog: boolean;
}>;

export class ConfigError extends Error {}

/** Parses the environment once; the message names the first offending variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ConfigError(`invalid ${String(issue.path[0])}: ${issue.message}`);
  }
  const e = parsed.data;
  const redisChoices = [
    e.REDIS_URL && 'REDIS_URL',
    e.REDIS_CLUSTER_NODES && 'REDIS_CLUSTER_NODES',
    e.REDIS_SENTINELS && 'REDIS_SENTINELS',
  ];
  const redisSet = redisChoices.filter(Boolean);
  if (redisSet.length > 1) {
    throw new ConfigError(`invalid ${redisSet[1]}: set only one of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS`);
  }
  if (e.REDIS_SENTINELS && !e.REDIS_SENTINEL_NAME) {
    throw new ConfigError("invalid REDIS_SENTINEL_NAME: required (the monitored primary's name) with REDIS_SENTINELS");
  }
  if (e.LOCK_BACKEND === 'redlock' && !e.REDIS_LOCK_URLS) {
    throw new ConfigError(
      'invalid REDIS_LOCK_URLS: required (comma-separated redis:// URLs) when LOCK_BACKEND=redlock',
    );
  }
  if (e.LOCK_BACKEND === 'zookeeper' && !e.ZOOKEEPER_CONNECT) {
    throw new ConfigError('invalid ZOOKEEPER_CONNECT: required (host:port list) when LOCK_BACKEND=zookeeper');
  }
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    redisUrl: e.REDIS_URL,
    redisClusterNodes: Object.freeze(e.REDIS_CLUSTER_NODES ?? []),
    redisSentinels: Object.freeze(e.REDIS_SENTINELS ?? []),
    redisSentinelName: e.REDIS_SENTINEL_NAME,
    redisPassword: e.REDIS_PASSWORD,
    databaseUrl: e.DATABASE_URL,
    adminToken: e.ADMIN_TOKEN,
    metricsToken: e.METRICS_TOKEN,
    lockTtlMs: e.LOCK_TTL_MS,
    lockWaitMs: e.LOCK_WAIT_MS,
    maxOrderQuantity: e.MAX_ORDER_QUANTITY,
    dataDir: path.resolve(e.DATA_DIR),
    logLevel: e.LOG_LEVEL,
    pgPoolSize: e.PG_POOL_SIZE,
    criticalSectionDelayMs: e.CRITICAL_SECTION_DELAY_MS,
    combineMaxBatch: e.COMBINE_MAX_BATCH,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    rateLimitOrdersPerMinute: e.RATE_LIMIT_ORDERS_PER_MINUTE,
    trustProxyHops: e.TRUST_PROXY_HOPS,
    lockBackend: e.LOCK_BACKEND,
    redisLockUrls: Object.freeze(e.REDIS_LOCK_URLS ?? []),
    zookeeperConnect: e.ZOOKEEPER_CONNECT,
    lockWatchdog: e.LOCK_WATCHDOG === '1' || e.LOCK_WATCHDOG === 'true',
  });
}
