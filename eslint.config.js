import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.pgfence/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // The examples are plain Node scripts, shown as they are in the README.
  {
    files: ['examples/**'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
)
