import pg from 'pg'
import type { TestDatabase } from '../support/database.js'
import { startEmbeddedPostgres } from '../support/services.js'

/**
 * A throwaway PostgreSQL server of its own with room for `connections` sessions, for a test
 * that holds more connections than the shared server's default of 100 leaves to one test file.
 * Its one database behaves like `createTestDatabase`'s; drop() stops the server and removes it.
 */
export async function startWideCluster(connections: number): Promise<TestDatabase> {
  const server = await startEmbeddedPostgres({ max_connections: String(connections), fsync: 'off' })
  const name = 'fenced'
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const url = new URL(server.url)
  url.pathname = `/${name}`
  return {
    name,
    url: url.toString(),
    host: url.hostname,
    port: Number(url.port),
    drop: () => server.stop(),
  }
}
