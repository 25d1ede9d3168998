/**
 * Mutation testing of the order path's decisions (`npm run test:mutation`): Stryker changes one operator, condition or
 * literal at a time in the files below and runs the server-less unit tests (vitest.mutation.config.ts); a change no
 * test notices survives and lowers the score. Equivalent survivors, and why, are listed in docs/testing.md.
 */

/**
 * The files (or line ranges, `file:from-to`) mutated: the one list to re-point when the order path moves. The fence
 * guard is a line of SQL text; the rest of its statement is judged by the tests that run it against Postgres.
 */
const mutated = [
  'src/orders/batch-plan.ts',
  'src/orders/outcome.ts',
  'src/inventory/segment-math.ts',
  'src/inventory/sale-window.ts',
  'src/orders/batch-statements.ts:123-123',
];

export default {
  mutate: mutated,
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts' },
  coverageAnalysis: 'perTest',
  // Two cores, shared: one test process per core.
  concurrency: 2,
  reporters: ['clear-text', 'progress', 'html'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  thresholds: { high: 90, low: 80, break: 80 },
  ignorePatterns: ['dist', '.data', 'coverage', 'reports', 'docs', 'deploy', 'loadtest/results'],
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
};
