// Real server processes on free loopback ports for the tests and the load test: the embedded default's own two
// (src/dev/servers) and the topologies only tests and benchmarks start (a Redis Cluster, Sentinel, ZooKeeper, a
// pg_auto_failover formation).
export {
  DataDirInUseError,
  MissingDependencyError,
  PostgresServer,
  RedisServer,
} from '../../../src/dev/servers/index.js';
export { RedisCluster, type RedisClusterOptions } from './redis-cluster.js';
export { RedisSentinelGroup, type RedisSentinelOptions, SentinelServer } from './redis-sentinel.js';
export { ZooKeeperServer, zookeeperMissing } from './zookeeper.js';
export { MONITOR_SETTINGS, PgAutoFailoverFormation, PgAutoctlNode, pgAutoFailoverMissing } from './pg-auto-failover.js';
