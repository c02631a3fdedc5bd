// typescript-eslint's strict type-checked rules over every TypeScript file of the workspace:
// sources, tests and benches, with the type information of tsconfig.tests.json (the program
// `make typecheck` checks).
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', '.tools/**', 'bench/results/**', 'test-output/**', '**/*.js', '**/*.mjs', '**/*.cjs'] },
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { project: './tsconfig.tests.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Numbers in messages and paths are what template literals are for.
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      // `() => resolve(x)` for a callback that returns nothing reads as meant; braces would not say more.
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
      // node:test's test() and describe() return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] }] },
      ],
    },
  },
  {
    // The dashboard is a browser program with its own compiler options (DOM, JSX): its own program.
    files: ['packages/dashboard/**/*.{ts,tsx}'],
    languageOptions: {
      parserOptions: { project: './packages/dashboard/tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    // Tests and benches only: two rules that are about style there, not about correctness.
    files: ['packages/*/test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      // Tests and benches index what they have just asserted or filled, and read the process they
      // have just started (`rows[0]!`, `byName.get('web')!`, `proc.pid!`): a check before each
      // would repeat the assertion, and a wrong guess fails the run on the spot anyway.
      '@typescript-eslint/no-non-null-assertion': 'off',
      // Fakes and stubs implement the async interfaces of the sources (Runtime, stores, probes)
      // with bodies that have nothing to wait for; `async` keeps them reading like the real ones.
      '@typescript-eslint/require-await': 'off',
    },
  },
);
