import pg from 'pg'
import { afterAll, beforeAll } from 'vitest'
import {
  adminQuery,
  createTestDatabase,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
export { POOL_PASSWORD, writeUserlist }

/** Client backends PostgreSQL runs for a database now. */
export async function backendsOf(database: string): Promise<number> {
  const { rows } = await adminQuery(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${database}' AND backend_type = 'client backend'`,
  )
  return rows[0].n
}

export interface NotesPool {
  /** A client logged in through the pool (SCRAM), its errors left to the test. */
  connect(): Promise<pg.Client>
  readonly proxy: TestProxy
  /** The database's own URL (straight to PostgreSQL). */
  readonly databaseUrl: string
}

/**
 * A database of its own with a table `notes (id int)`, behind a transaction-mode pool of `size`
 * (waitTimeoutMs 5000) with `limits`: for the file that calls it.
 */
export function notesPool(label: string, size: number, limits: ConfigOverrides['limits'] = {}) {
  let db: TestDatabase
  let proxy: TestProxy
  beforeAll(async () => {
    db = await createTestDatabase(label)
    await queryOnce(db.url, 'CREATE TABLE notes (id int)')
    proxy = await startTestProxy(
      {
        pool: { mode: 'transaction', size, waitTimeoutMs: 5000 },
        auth: { file: writeUserlist() },
        limits,
      },
      db.url,
    )
  })
  afterAll(async () => {
    await proxy?.close()
    await db?.drop()
  })
  const pool: NotesPool = {
    async connect() {
      const url = proxy.url('postgres', db.name, POOL_PASSWORD)
      const client = new pg.Client({ connectionString: url })
      client.on('error', () => {})
      await client.connect()
      return client
    },
    get proxy() {
      return proxy
    },
    get databaseUrl() {
      return db.url
    },
  }
  return pool
}
