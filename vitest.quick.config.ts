import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * `npm run test:quick`, for the edit-run loop (about a minute here): the suite without the fault, fuzz, checker and
 * browser files, and without the lock backends other than Redis (Postgres, ZooKeeper, Redlock), the Redis Cluster
 * topology and the cross-process file (three service processes on one Redis and on a Redis Cluster), which start
 * servers of their own. `npm test`, which CI runs, is always the whole suite.
 */
export default mergeConfig(
  base,
  defineConfig({
    test: {
      exclude: [
        ...configDefaults.exclude,
        'test/faults/**',
        'test/fuzz/**',
        'test/checker/**',
        'test/browser/**',
        'test/lock/{postgres,zookeeper,redlock,order-flow-backends,cross-backend-fencing}.test.ts',
        'test/integration/{redis-cluster,cross-process}.test.ts',
      ],
    },
  }),
);
