import { defineConfig } from 'vitest/config'

/** The end-to-end suites that run a second time with every session relayed in JavaScript. */
const nodeRelaySuites = [
  'test/e2e/node-postgres.test.ts',
  'test/e2e/postgres-js.test.ts',
  'test/e2e/psql.test.ts',
  'test/e2e/abuse.test.ts',
  'test/e2e/tls.test.ts',
  'test/pool/session-mode.test.ts',
  'test/fencing-e2e/node-postgres.test.ts',
  'test/fencing-e2e/postgres-js.test.ts',
  'test/faults/timeouts.test.ts',
  'test/faults/outcomes.test.ts',
  'test/faults/invariant.test.ts',
  'test/fencing-e2e/readable-errors.test.ts',
  'test/fence/maintenance-log.test.ts',
]

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/support/global-setup.ts'],
    fileParallelism: true,
    projects: [
      { extends: true, test: { name: 'native relay', include: ['test/**/*.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'node relay',
          include: nodeRelaySuites,
          env: { PGFENCE_TEST_RELAY: 'node' },
        },
      },
    ],
  },
})
