import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * `npm run test:quick`, for the edit-run loop: the suite without the fault, fuzz, checker and browser files, and
 * without the lock backends other than Redis (Postgres, ZooKeeper, Redlock), the Redis Cluster topology and the
 * cross-process file (three service processes on one Redis and on a Redis Cluster), which start servers of their own,
 * and the npm-start file (the build and the embedded servers, twice).
 * Its files share one worker and its loaded modules (`isolate: false`): importing the service afresh for each file
 * took about a third of the run. Every file starts its own services and makes its own SKUs, so none depends on what
 * another left behind. `npm test`, which CI runs, is always the whole suite, each file in a fresh worker.
 */
export default mergeConfig(
  base,
  defineConfig({
    test: {
      isolate: false,
      exclude: [
        ...configDefaults.exclude,
        'test/faults/**',
        'test/fuzz/**',
        'test/checker/**',
        'test/browser/**',
        'test/lock/{postgres,zookeeper,redlock,order-flow-backends,cross-backend-fencing}.test.ts',
        'test/integration/{redis-cluster,cross-process,npm-start}.test.ts',
      ],
    },
  }),
);
