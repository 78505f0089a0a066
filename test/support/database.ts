import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { inject } from 'vitest'

export interface TestDatabase {
  name: string
  /** URL of the new database, straight to PostgreSQL. */
  url: string
  host: string
  port: number
  drop(): Promise<void>
}

/** Runs one statement as the superuser on the server's maintenance database. */
export const adminQuery = (sql: string): Promise<pg.QueryResult> =>
  queryOnce(inject('postgresUrl'), sql)

/** Runs SQL on a connection of its own to `url`. */
export async function queryOnce(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await client.query(sql)
  } finally {
    await client.end()
  }
}

/** A database of its own for one test file; drop() removes it even with sessions still open. */
export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const name = `pgfence_${label.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`
  await adminQuery(`CREATE DATABASE ${name}`)
  const url = new URL(inject('postgresUrl'))
  url.pathname = `/${name}`
  return {
    name,
    url: url.toString(),
    host: url.hostname,
    port: Number(url.port || 5432),
    drop: async () => void (await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
  }
}

/**
 * Connection options of a test's own fixture connection: it seeds and reads fenced tables with
 * pgfence.maintenance on, as a superuser, so the fence triggers let it write any token.
 */
export const maintenanceSession = { options: '-c pgfence.maintenance=on' }
