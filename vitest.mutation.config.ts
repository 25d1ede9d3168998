import { defineConfig } from 'vitest/config';

/**
 * `npm run test:mutation` (stryker.config.mjs): the tests that need no server, which judge the order path's
 * decisions. No global setup: nothing here starts Redis or Postgres.
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts'],
  },
});
