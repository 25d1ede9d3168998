// Real server processes on free loopback ports, for the embedded default (src/dev/endpoints.ts), the tests and the
// benchmarks: one file per kind, their common life cycle in server-process.ts.
export { DataDirInUseError } from './leftover-process.js';
export { type PostgresOptions, PostgresServer } from './postgres.js';
export { type RedisOptions, RedisServer } from './redis.js';
export { RedisCluster, type RedisClusterOptions } from './redis-cluster.js';
export { RedisSentinelGroup, type RedisSentinelOptions, SentinelServer } from './redis-sentinel.js';
export { MissingDependencyError, type ServerOptions, type StopMode } from './server-process.js';
export { ZooKeeperServer, zookeeperMissing } from './zookeeper.js';
