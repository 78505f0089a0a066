import { once } from 'node:events'
import pg from 'pg'
import type { TestDatabase } from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { waitFor } from '../e2e/support/wait.js'
import { FaultRelay } from './fault-relay.js'
export { sqlstateOf } from '../support/sqlstate.js'

/** pgfence in front of a fault relay in front of the test database. */
export interface FaultStack {
  relay: FaultRelay
  proxy: TestProxy
  /** A client through pgfence that reports its connection errors instead of throwing them. */
  client(applicationName?: string): Promise<pg.Client>
  close(): Promise<void>
}

export async function startFaultStack(
  db: TestDatabase,
  overrides: ConfigOverrides = {},
): Promise<FaultStack> {
  const relay = await FaultRelay.start({ host: db.host, port: db.port })
  const proxy = await startTestProxy(
    { ...overrides, upstream: { port: relay.port, tls: 'disable', ...overrides.upstream } },
    db.url,
  )
  const clients: pg.Client[] = []
  return {
    relay,
    proxy,
    client: async (applicationName) => {
      const client = new pg.Client({
        connectionString: proxy.url(),
        application_name: applicationName,
      })
      client.on('error', () => {}) // read through connectionError()
      clients.push(client)
      await client.connect()
      return client
    },
    close: async () => {
      await Promise.all(clients.map((client) => client.end().catch(() => {})))
      await proxy.close()
      await relay.close()
    },
  }
}

/** The SQLSTATE of the error a client gets while it is not waiting for a query. */
export async function connectionError(client: pg.Client): Promise<string | undefined> {
  const [error] = (await once(client, 'error')) as [{ code?: string }]
  return error.code
}

/** Waits until no backend of `applicationName` is left on the server. */
export async function backendsGone(admin: pg.Client, applicationName: string): Promise<void> {
  await waitFor(
    async () =>
      (
        await admin.query(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
          [applicationName],
        )
      ).rows[0].n === 0,
    { timeoutMs: 5000, what: `the backends of ${applicationName} to end` },
  )
}

/** Waits until a backend of `applicationName` runs `query` (its text starts so). */
export async function backendRuns(
  admin: pg.Client,
  applicationName: string,
  query: string,
): Promise<void> {
  await waitFor(
    async () =>
      (
        await admin.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE application_name = $1 AND state = 'active' AND query LIKE $2 || '%'`,
          [applicationName, query],
        )
      ).rows[0].n > 0,
    { timeoutMs: 5000, what: `${applicationName} to run ${query}` },
  )
}
