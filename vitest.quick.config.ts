import { configDefaults, defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * `npm run test:quick`, for the edit-run loop: every file that proves the service's behaviour on one instance with the
 * test Redis and Postgres. Left to `npm test`, which CI runs, each file in a fresh worker, are the files whose time
 * goes into starting something else rather than into the service's own code:
 * - fault, fuzz, checker and browser files;
 * - other lock backends (Postgres, ZooKeeper, Redlock) and other topologies (Redis Cluster, a Postgres standby);
 * - fleets: several service processes at once (cross-process, the waiting line's fleet, a customer on two
 *   instances, the shared rate limit, clocks that disagree, adjustments beside a flood on two instances), and the
 *   fleet series over an hour of blocks;
 * - the README read as a contract (its examples run, and checked through Prism) and `npm start` itself;
 * - the checks of the lint rules (layers, knip), which `npm run lint` runs, and the slow-client bounds, which wait
 *   out the server's request timeouts, and the never-reading streams' memory, watched over a minute;
 * - sizes a property is about: ten thousand reservations expiring together.
 * Its files share one worker and its loaded modules (`isolate: false`): the service is imported once, not once a
 * file. Every file starts its own services and makes its own SKUs, so none depends on what another left behind.
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
        'test/integration/{redis-cluster,postgres-listed-hosts,cross-process,npm-start}.test.ts',
        'test/integration/{line-fleet,shared-rate-limit,sale-window-clocks,fleet-series,stock-reconcile-fleet}.test.ts',
        'test/security/customer-fleet.test.ts',
        'test/integration/{readme-examples,bulk-expiry}.test.ts',
        'test/security/{readme-contract,slow-clients,slow-stream-readers}.test.ts',
        'test/unit/{layers,knip}.test.ts',
      ],
    },
  }),
);
