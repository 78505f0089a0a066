import { defineConfig } from 'vitest/config'

/** The end-to-end suites that run a second time with every session relayed in JavaScript. */
const nodeRelaySuites = [
  'test/e2e/node-postgres.test.ts',
  'test/e2e/postgres-js.test.ts',
  'test/e2e/psql.test.ts',
  'test/e2e/abuse.test.ts',
  'test/e2e/tls.test.ts',
  'test/pool/session-mode.test.ts',
  'test/pool/transaction-lazy-release.test.ts',
  'test/fencing-e2e/node-postgres.test.ts',
  'test/fencing-e2e/postgres-js.test.ts',
  'test/faults/timeouts.test.ts',
  'test/faults/outcomes.test.ts',
  'test/faults/invariant.test.ts',
  'test/fencing-e2e/readable-errors.test.ts',
  'test/fence/maintenance-log.test.ts',
  'test/fence/maintenance-writes.test.ts',
]

/**
 * The client and fencing end-to-end suites that run again through a pool (PGFENCE_TEST_POOL;
 * test/support/proxy.ts adds the pool and a userlist): pooling must change nothing a client
 * sees, except where the README says so (there the case asserts what the README says).
 */
const pooledSuites = [
  'test/e2e/node-postgres.test.ts',
  'test/e2e/postgres-js.test.ts',
  'test/e2e/psql.test.ts',
  'test/fencing-e2e/node-postgres.test.ts',
  'test/fencing-e2e/postgres-js.test.ts',
  'test/fencing-e2e/psql.test.ts',
  'test/fencing-e2e/readable-errors.test.ts',
  'test/fence/maintenance-writes.test.ts',
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
      {
        extends: true,
        test: {
          name: 'session pool',
          include: [
            ...pooledSuites,
            // 100 clients, each holding a server connection of a pool as large as the crowd.
            'test/fencing-e2e/many-connections.test.ts',
            // pg_dump's session settings (search_path) last only a transaction in transaction mode.
            'test/e2e/pg-dump.test.ts',
          ],
          env: { PGFENCE_TEST_POOL: 'session' },
        },
      },
      {
        extends: true,
        test: {
          name: 'transaction pool',
          // Where session state moves between server connections: ORMs, pgbench, resource fences.
          include: [
            ...pooledSuites,
            'test/orm/*.test.ts',
            'test/e2e/pgbench.test.ts',
            'test/resource/*.test.ts',
          ],
          env: { PGFENCE_TEST_POOL: 'transaction' },
        },
      },
    ],
  },
})
