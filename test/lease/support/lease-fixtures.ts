import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import pg from 'pg'
import { inject } from 'vitest'
import { LeaseManager, type LeaseManagerOptions } from '../../../src/lease/index.js'
import { fencingConfig, installFencing } from '../../fence/support.js'
import { createTestDatabase, type TestDatabase } from '../../support/database.js'

/** A key prefix no other test file uses, so files can run in parallel on one Redis. */
export function uniqueKeyPrefix(label: string): string {
  return `pgfence-test:${label}:${randomBytes(4).toString('hex')}:`
}

/**
 * A test database migrated as `pgfence migrate` does with no fenced table: it has
 * `pgfence.next_token()` and the postgres lease store's `pgfence.leases`.
 */
export async function createTokenDatabase(label: string): Promise<TestDatabase> {
  const db = await createTestDatabase(label)
  await installFencing(db.url, fencingConfig())
  return db
}

export async function runSql(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await client.query(sql)
  } finally {
    await client.end()
  }
}

export function redisUrl(): string {
  const url = inject('redisUrl')
  if (!url) throw new Error('the lease tests need Redis (PGFENCE_TEST_REDIS_URL or 127.0.0.1:6379)')
  return url
}

export function connectRedis(): Redis {
  return new Redis(redisUrl())
}

/**
 * Managers for one test file (on Redis unless a `store` is given); `closeAll` in afterAll.
 * Signals stay with the test runner.
 */
export function managerFactory(defaults: LeaseManagerOptions) {
  const managers: LeaseManager[] = []
  return {
    create(options: LeaseManagerOptions = {}): LeaseManager {
      const named = { ...defaults, ...options }
      const manager = new LeaseManager({
        handleSignals: false,
        ...(named.store || named.redis ? {} : { store: { redis: redisUrl() } }),
        ...named,
      })
      managers.push(manager)
      return manager
    },
    closeAll: () => Promise.all(managers.map((manager) => manager.close())),
  }
}

/** Resolves with the abort reason as soon as the signal aborts. */
export function abortReason(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason)
  return new Promise((resolve) =>
    signal.addEventListener('abort', () => resolve(signal.reason), { once: true }),
  )
}
