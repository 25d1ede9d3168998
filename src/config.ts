import path from 'node:path';
import { z } from 'zod';
import { type ApiKey, readApiKeys } from './api-keys-file.js';
import { ConfigError } from './errors.js';

const port = z.coerce.number().int().min(0).max(65535);
const positiveMs = (max: number) => z.coerce.number().int().min(1).max(max);
const emptyAsUnset = (value: unknown) => (value === '' ? undefined : value);

/** `0`, `1`, `false` or `true` (blank: the default), as a boolean. */
const flag = (fallback: '0' | '1') =>
  z
    .preprocess(emptyAsUnset, z.enum(['0', '1', 'false', 'true']).default(fallback))
    .transform((value) => value === '1' || value === 'true');

/** `a,b,…` (blank: unset) as a list of items. */
const commaList = (item: z.ZodString | z.ZodURL) =>
  z.preprocess(
    (value) => (typeof value === 'string' && value.trim() !== '' ? value.split(',').map((x) => x.trim()) : undefined),
    z.array(item).min(1).optional(),
  );
const hostPorts = commaList(z.string().regex(/^[\w.-]+:\d{1,5}$/, 'must be host:port[,host:port…]'));

const configSchema = z.object({
  PORT: port.default(3000),
  // Service processes on PORT (node's cluster), each a full instance; unset: one per core the machine can spare.
  WORKERS: z.preprocess(emptyAsUnset, z.coerce.number().int().min(1).max(256).optional()),
  HOST: z.string().min(1).default('127.0.0.1'),
  REDIS_URL: z.preprocess(emptyAsUnset, z.url({ protocol: /^rediss?$/ }).optional()),
  // A Redis Cluster (seed nodes) or a primary watched by Sentinels, instead of REDIS_URL: at most one of the three.
  REDIS_CLUSTER_NODES: hostPorts,
  REDIS_SENTINELS: hostPorts,
  REDIS_SENTINEL_NAME: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  // The password of the cluster's or the Sentinel-watched primary's nodes (a REDIS_URL carries its own).
  REDIS_PASSWORD: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  // libpq's forms, with several hosts if wanted (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write, or
  // host=h1,h2 …): src/db/connection-string.ts reads it, and fails the start on what it cannot.
  DATABASE_URL: z.preprocess(
    emptyAsUnset,
    z
      .string()
      .regex(/^postgres(ql)?:\/\/|^\s*[a-z_]+\s*=/i, 'must be a postgres:// URI or libpq key=value pairs')
      .optional(),
  ),
  ADMIN_TOKEN: z.preprocess(emptyAsUnset, z.string().min(16, 'must be at least 16 characters').optional()),
  // Read-only monitoring (GET /metrics, the dashboard's data) without the power to change stock.
  METRICS_TOKEN: z.preprocess(emptyAsUnset, z.string().min(16, 'must be at least 16 characters').optional()),
  // Service keys with scopes: a JSON file of [{name, sha256, scopes}] (hashes, never keys).
  API_KEYS_FILE: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  // Customer tokens (JWTs acting for the customer in `sub`): keys from a JWKS, or a shared HS256 secret (development).
  CUSTOMER_JWKS_URL: z.preprocess(emptyAsUnset, z.url({ protocol: /^https?$/ }).optional()),
  CUSTOMER_JWT_SECRET: z.preprocess(emptyAsUnset, z.string().min(32, 'must be at least 32 characters').optional()),
  CUSTOMER_JWT_ISSUER: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  CUSTOMER_JWT_AUDIENCE: z.preprocess(emptyAsUnset, z.string().min(1).optional()),
  // The longest a customer token may be valid: `exp` at most this long after its `iat` (without `iat`, after now).
  CUSTOMER_TOKEN_MAX_LIFETIME_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(366 * 86_400)
    .default(86_400),
  // Whether a customer token may cancel its own confirmed orders (a refund); off, only orders:manage may.
  CUSTOMER_CANCEL_CONFIRMED: flag('0'),
  LOCK_TTL_MS: positiveMs(600_000).default(10_000),
  LOCK_WAIT_MS: positiveMs(600_000).default(2_000),
  // Joins of a waiting line only with a customer token: without one, a customerId is the caller's claim.
  LINE_JOINS_REQUIRE_CUSTOMER_TOKEN: flag('0'),
  MAX_ORDER_QUANTITY: z.coerce.number().int().min(1).max(1_000_000_000).default(1000),
  DATA_DIR: z.string().min(1).default('.data'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  PG_POOL_SIZE: z.coerce.number().int().min(1).max(500).default(20),
  COMBINE_MAX_BATCH: z.coerce.number().int().min(1).max(1_000).default(64),
  // Batches of orders one instance runs at once, each on segments none of the others holds; each reads and writes on
  // one connection of the order path's own Postgres pool, which has this many (src/db/database.ts).
  BATCHES_IN_FLIGHT: z.coerce.number().int().min(1).max(500).default(20),
  SHUTDOWN_GRACE_MS: positiveMs(600_000).default(10_000),
  // Test-only: shifts this process's own clock, to show that sale windows follow the shared clock, not the host's.
  PROCESS_CLOCK_SKEW_MS: z.coerce.number().int().min(-86_400_000).max(86_400_000).default(0),
  // Orders one client may place per minute on one instance; 0 (the default) turns the limit off, as load tests need.
  RATE_LIMIT_ORDERS_PER_MINUTE: z.coerce.number().int().min(0).max(1_000_000).default(0),
  // Proxies in front of the service whose X-Forwarded-For to believe, so the rate limit sees clients, not the proxy.
  TRUST_PROXY_HOPS: z.coerce.number().int().min(0).max(10).default(0),
  // Open connections one peer address may hold; more are closed on arrival. 0: no cap (behind a load balancer, where
  // every connection is the balancer's). Above the load test's few hundred from loopback.
  MAX_CONNECTIONS_PER_ADDRESS: z.coerce.number().int().min(0).max(1_000_000).default(1024),
  // Where the segment locks live (docs/locks.md): the service's Redis, Redlock over REDIS_LOCK_URLS, the service's
  // Postgres, or ZooKeeper at ZOOKEEPER_CONNECT.
  LOCK_BACKEND: z.preprocess(emptyAsUnset, z.enum(['redis', 'redlock', 'postgres', 'zookeeper']).default('redis')),
  REDIS_LOCK_URLS: commaList(z.url({ protocol: /^rediss?$/ })),
  ZOOKEEPER_CONNECT: z.preprocess(
    emptyAsUnset,
    z
      .string()
      .regex(/^[\w.-]+:\d+(,[\w.-]+:\d+)*(\/[\w./-]*)?$/, 'must be host:port[,host:port…][/chroot]')
      .optional(),
  ),
  // Stock and order events (docs/events.md): off writes none, for measuring what they cost; keep them on otherwise.
  EVENTS: z.preprocess(emptyAsUnset, z.enum(['on', 'off']).default('on')),
  // How long events (and webhook delivery records) are kept: 7 days by default.
  EVENTS_RETENTION_SECONDS: z.coerce
    .number()
    .int()
    .min(1)
    .max(366 * 86_400)
    .default(7 * 86_400),
  // How often each instance sequences committed events into the feed, and how often streams and senders look for them.
  EVENTS_POLL_MS: positiveMs(10_000).default(100),
  // Webhook retries: first after about WEBHOOK_BACKOFF_BASE_MS, doubling up to WEBHOOK_BACKOFF_MAX_MS, with jitter;
  // an event failing for WEBHOOK_RETRY_FOR_MS (26 h by default) is marked failed and the endpoint moves on.
  WEBHOOK_BACKOFF_BASE_MS: positiveMs(3_600_000).default(5_000),
  WEBHOOK_BACKOFF_MAX_MS: positiveMs(86_400_000).default(3_600_000),
  WEBHOOK_RETRY_FOR_MS: positiveMs(30 * 86_400_000).default(26 * 3_600_000),
  WEBHOOK_TIMEOUT_MS: positiveMs(600_000).default(10_000),
  // What one event or dashboard stream may leave unread in its reader's connection before it is closed with the id
  // to resume after, and how many streams one caller may hold open on one instance (docs/operations.md#slow-clients).
  STREAM_MAX_BUFFERED_BYTES: z.coerce.number().int().min(65_536).max(1_073_741_824).default(262_144),
  STREAMS_PER_CALLER: z.coerce.number().int().min(1).max(100_000).default(32),
  // Lets webhooks reach loopback, private and link-local addresses: development and tests only (docs/operations.md).
  WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: flag('0'),
  // How often the books audit checks SKUs' books (src/audit, docs/operations.md#the-books-audit); 0 turns it off.
  AUDIT_INTERVAL_MS: z.coerce.number().int().min(0).max(3_600_000).default(2_000),
  // The share of the time the audit's sweep of whole books may take, in per cent: its full pass takes longer as the
  // ledger grows, instead of its cost.
  AUDIT_SWEEP_PERCENT: z.coerce.number().min(1).max(100).default(5),
  // Renew held segment locks every LOCK_TTL_MS / 3 while their holder lives; off, a lease simply expires.
  LOCK_WATCHDOG: flag('1'),
});

export type Config = Readonly<{
  port: number;
  host: string;
  /** Service processes on `port`; undefined: one per core the machine can spare (src/run.ts). */
  workers: number | undefined;
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
  /** Service keys from API_KEYS_FILE; undefined when it is not set. */
  apiKeys: readonly ApiKey[] | undefined;
  /** How customer tokens are verified; undefined when no customer issuer is configured. */
  customerTokens: CustomerTokens | undefined;
  customerCancelConfirmed: boolean;
  lockTtlMs: number;
  lockWaitMs: number;
  maxOrderQuantity: number;
  /** A line's joins answer 403 unless the caller holds a customer token. */
  lineJoinsRequireCustomerToken: boolean;
  dataDir: string;
  logLevel: string;
  pgPoolSize: number;
  /** Most orders in one batch: locked, decided and written together (1 places every order on its own). */
  combineMaxBatch: number;
  batchesInFlight: number;
  shutdownGraceMs: number;
  processClockSkewMs: number;
  rateLimitOrdersPerMinute: number;
  trustProxyHops: number;
  /** Open connections one peer address may hold (0: no cap). */
  maxConnectionsPerAddress: number;
  lockBackend: 'redis' | 'redlock' | 'postgres' | 'zookeeper';
  redisLockUrls: readonly string[];
  zookeeperConnect: string | undefined;
  lockWatchdog: boolean;
  /** Milliseconds between books audit passes; 0: no audit. */
  auditIntervalMs: number;
  auditSweepShare: number;
  events: EventsConfig;
  streams: StreamsConfig;
}>;

export type StreamsConfig = Readonly<{
  /** Bytes one stream may leave unread in its reader's connection before it is closed for lagging. */
  maxBufferedBytes: number;
  /** Event and dashboard streams one caller may hold open on one instance. */
  perCaller: number;
}>;

export type EventsConfig = Readonly<{
  /** Whether changes write their events (EVENTS). */
  enabled: boolean;
  retentionMs: number;
  pollMs: number;
  webhookBackoffBaseMs: number;
  webhookBackoffMaxMs: number;
  webhookRetryForMs: number;
  webhookTimeoutMs: number;
  webhookAllowPrivateDestinations: boolean;
}>;

/** Customer JWTs: verified with the keys of `jwksUrl` (RS, PS, ES, EdDSA) or with `secret` (HS256), never both. */
export type CustomerTokens = Readonly<{
  jwksUrl: string | undefined;
  secret: string | undefined;
  issuer: string;
  audience: string;
  /** Longest `exp − iat` (or `exp − now` without `iat`) accepted. */
  maxLifetimeSeconds: number;
}>;

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
  if (e.CUSTOMER_JWKS_URL && e.CUSTOMER_JWT_SECRET) {
    throw new ConfigError('invalid CUSTOMER_JWT_SECRET: set either CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET, not both');
  }
  const customerKeys = e.CUSTOMER_JWKS_URL ?? e.CUSTOMER_JWT_SECRET;
  for (const name of ['CUSTOMER_JWT_ISSUER', 'CUSTOMER_JWT_AUDIENCE'] as const) {
    if (customerKeys && !e[name]) {
      throw new ConfigError(`invalid ${name}: required with CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET`);
    }
    if (!customerKeys && e[name]) {
      throw new ConfigError(`invalid ${name}: set CUSTOMER_JWKS_URL or CUSTOMER_JWT_SECRET too`);
    }
  }
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    workers: e.WORKERS,
    redisUrl: e.REDIS_URL,
    redisClusterNodes: Object.freeze(e.REDIS_CLUSTER_NODES ?? []),
    redisSentinels: Object.freeze(e.REDIS_SENTINELS ?? []),
    redisSentinelName: e.REDIS_SENTINEL_NAME,
    redisPassword: e.REDIS_PASSWORD,
    databaseUrl: e.DATABASE_URL,
    adminToken: e.ADMIN_TOKEN,
    metricsToken: e.METRICS_TOKEN,
    apiKeys: e.API_KEYS_FILE === undefined ? undefined : readApiKeys(e.API_KEYS_FILE),
    customerTokens: customerKeys
      ? Object.freeze({
          jwksUrl: e.CUSTOMER_JWKS_URL,
          secret: e.CUSTOMER_JWT_SECRET,
          issuer: e.CUSTOMER_JWT_ISSUER!,
          audience: e.CUSTOMER_JWT_AUDIENCE!,
          maxLifetimeSeconds: e.CUSTOMER_TOKEN_MAX_LIFETIME_SECONDS,
        })
      : undefined,
    customerCancelConfirmed: e.CUSTOMER_CANCEL_CONFIRMED,
    lockTtlMs: e.LOCK_TTL_MS,
    lockWaitMs: e.LOCK_WAIT_MS,
    maxOrderQuantity: e.MAX_ORDER_QUANTITY,
    lineJoinsRequireCustomerToken: e.LINE_JOINS_REQUIRE_CUSTOMER_TOKEN,
    dataDir: path.resolve(e.DATA_DIR),
    logLevel: e.LOG_LEVEL,
    pgPoolSize: e.PG_POOL_SIZE,
    combineMaxBatch: e.COMBINE_MAX_BATCH,
    batchesInFlight: e.BATCHES_IN_FLIGHT,
    processClockSkewMs: e.PROCESS_CLOCK_SKEW_MS,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    rateLimitOrdersPerMinute: e.RATE_LIMIT_ORDERS_PER_MINUTE,
    trustProxyHops: e.TRUST_PROXY_HOPS,
    maxConnectionsPerAddress: e.MAX_CONNECTIONS_PER_ADDRESS,
    lockBackend: e.LOCK_BACKEND,
    redisLockUrls: Object.freeze(e.REDIS_LOCK_URLS ?? []),
    zookeeperConnect: e.ZOOKEEPER_CONNECT,
    lockWatchdog: e.LOCK_WATCHDOG,
    auditIntervalMs: e.AUDIT_INTERVAL_MS,
    auditSweepShare: e.AUDIT_SWEEP_PERCENT / 100,
    events: Object.freeze({
      enabled: e.EVENTS === 'on',
      retentionMs: e.EVENTS_RETENTION_SECONDS * 1000,
      pollMs: e.EVENTS_POLL_MS,
      webhookBackoffBaseMs: e.WEBHOOK_BACKOFF_BASE_MS,
      webhookBackoffMaxMs: e.WEBHOOK_BACKOFF_MAX_MS,
      webhookRetryForMs: e.WEBHOOK_RETRY_FOR_MS,
      webhookTimeoutMs: e.WEBHOOK_TIMEOUT_MS,
      webhookAllowPrivateDestinations: e.WEBHOOK_ALLOW_PRIVATE_DESTINATIONS,
    }),
    streams: Object.freeze({ maxBufferedBytes: e.STREAM_MAX_BUFFERED_BYTES, perCaller: e.STREAMS_PER_CALLER }),
  });
}
