import { defineConfig } from 'vitest/config';

/**
 * The fault suite alone (`npm run test:faults`). Every case starts its own Redis and Postgres, so no global setup;
 * cases run one at a time: each already loads both cores with several service processes.
 */
export default defineConfig({
  test: {
    include: ['test/faults/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
