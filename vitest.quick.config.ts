import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * `npm run test:quick`, for the edit-run loop (about a minute here): the suite without the fault, fuzz, checker and
 * browser files, and without the lock backends other than Redis (Postgres, ZooKeeper, Redlock) and the Redis Cluster
 * topology, which start servers of their own. `npm test`, which CI runs, is always the whole suite.
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
        'test/integration/redis-cluster.test.ts',
      ],
    },
  }),
);
