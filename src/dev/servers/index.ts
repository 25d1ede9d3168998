// The embedded default's servers (src/dev/embedded.ts) on free loopback ports: one file per kind, their common life
// cycle in server-process.ts. The tests and the load test start these too (test/support/servers adds the rest).
export { DataDirInUseError } from './leftover-process.js';
export { PostgresServer } from './postgres.js';
export { RedisServer } from './redis.js';
export { MissingDependencyError } from './server-process.js';
