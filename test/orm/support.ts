import pg from 'pg'
import { waitFor } from '../e2e/support/wait.js'
import { parseConfig } from '../../src/config/load.js'
import { createLogger } from '../../src/log.js'
import { startProxy, type RunningProxy } from '../../src/proxy/proxy-server.js'
import { columnProblems } from '../../src/schema/fence-columns.js'
import { installSql } from '../../src/schema/install.js'
import { resolveTables } from '../../src/schema/resolve-tables.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { pooledRun, relayUnderTest, urlThrough } from '../support/proxy.js'

/** A database with the ORM's table, `pgfence migrate` done, and pgfence in front of it. */
export interface OrmStack {
  db: TestDatabase
  /** The database through pgfence: what the ORM connects to. */
  url: string
  /** Straight to PostgreSQL, to look at rows. */
  admin: pg.Client
  /** The row's columns as text, read past pgfence. */
  row(table: string, id: number): Promise<Record<string, string> | undefined>
  close(): Promise<void>
}

/**
 * `createSchema` creates the table (SQL, or a function given the direct URL, for an ORM's own
 * sync); `table` is the name the config gives it (e.g. `Invoices` for Sequelize's "Invoices").
 * The fence column is then added (or made NOT NULL DEFAULT 0) as `pgfence migrate` does it, and
 * the proxy runs as `pgfence start` runs it.
 */
export async function ormStack(
  label: string,
  createSchema: string | ((directUrl: string) => Promise<void>),
  table: string,
): Promise<OrmStack> {
  const db = await createTestDatabase(`orm_${label}`)
  const admin = new pg.Client({ connectionString: db.url })
  await admin.connect()
  if (typeof createSchema === 'string') await admin.query(createSchema)
  else await createSchema(db.url)
  const pooled = pooledRun(db.url)
  const config = parseConfig({
    ...pooled.overrides,
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: db.host, port: db.port, tls: 'disable' },
    limits: { shutdownTimeoutMs: 1000 },
    fencing: { tables: [{ name: table }] },
    relay: relayUnderTest(),
  })
  const { tables, problems } = await resolveTables(admin, config.fencing)
  const all = [...problems.map((p) => p.message), ...(await columnProblems(admin, tables))]
  if (all.length > 0) throw new Error(all.join('\n'))
  await admin.query(installSql(config.fencing, tables))
  const proxy: RunningProxy = await startProxy(config, { logger: createLogger('silent') })
  return {
    db,
    url: urlThrough(db.url, proxy, pooled.password),
    admin,
    row: async (name, id) =>
      (await admin.query(`SELECT * FROM "${name}" WHERE id = $1`, [id])).rows.map((row) =>
        Object.fromEntries(Object.entries(row).map(([k, v]) => [k, String(v)])),
      )[0],
    close: async () => {
      // A pool's end() resolves before its clients' Terminate reached the proxy: wait for them,
      // or the proxy's shutdown would tell the leaving clients 57P01.
      await waitFor(() => proxy.connectionCount() === 0, { what: 'the ORM clients to leave' })
      await proxy.close()
      await admin.end()
      await db.drop()
    },
  }
}

/** Where the ORMs put the driver's error and its SQLSTATE. */
export interface OrmError {
  name?: string
  code?: string
  parent?: { code?: string }
  original?: { code?: string }
  driverError?: { code?: string }
  cause?: { code?: string }
}

/** What a promise was rejected with (it must be rejected). */
export async function rejection(promise: Promise<unknown>): Promise<OrmError> {
  try {
    await promise
  } catch (err) {
    return err as OrmError
  }
  throw new Error('expected the write to be refused')
}
