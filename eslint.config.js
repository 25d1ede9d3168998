// Lint rules for the whole tree; formatting is Prettier's (eslint-config-prettier turns off the rules it owns).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

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
);
