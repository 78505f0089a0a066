import pg from 'pg'
import { parseConfig } from '../../src/config/load.js'
import type { FencingConfig } from '../../src/config/schema.js'
import { createLogger } from '../../src/log.js'
import { startProxy, type RunningProxy } from '../../src/proxy/proxy-server.js'
import { pooledRun, urlThrough } from '../support/proxy.js'
import { installSql } from '../../src/schema/install.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
export { sqlstateOf } from '../support/sqlstate.js'

/**
 * The resource rules of the product story, next to one row-fenced table: `payouts` and
 * `ledger_entries` under the fixed resource nightly-billing, `tenant_jobs` named by the session.
 */
export const storyFencing = {
  tables: [{ name: 'invoices' }],
  resources: [
    { tables: ['payouts', 'ledger_entries'], resource: 'nightly-billing' },
    { tables: ['tenant_jobs'], resourceFrom: 'session' as const },
  ],
}

export const storySchemaSql = `
CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL);
CREATE TABLE payouts (id int PRIMARY KEY, amount int NOT NULL, due date);
CREATE TABLE ledger_entries (id bigserial PRIMARY KEY, note text NOT NULL);
CREATE TABLE tenant_jobs (id int PRIMARY KEY, tenant text NOT NULL, state text NOT NULL);
`

/** A test database with the schema and pgfence installed, and a proxy in front of it. */
export interface FencedDatabase {
  db: TestDatabase
  proxy: RunningProxy
  fencing: FencingConfig
  /** The database through the proxy. */
  proxyUrl: string
  /** A new client through the proxy, connected; closed by `close()`. */
  connect(): Promise<pg.Client>
  /** A new client straight to PostgreSQL, connected; closed by `close()`. */
  connectDirect(): Promise<pg.Client>
  close(): Promise<void>
}

export async function fencedDatabase(
  label: string,
  fencing: Record<string, unknown>,
  schemaSql: string,
): Promise<FencedDatabase> {
  const db = await createTestDatabase(label)
  const pooled = pooledRun(db.url)
  const config = parseConfig({
    ...pooled.overrides,
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: db.host, port: db.port, tls: 'disable' },
    limits: { shutdownTimeoutMs: 1000 },
    fencing,
  })
  const clients: pg.Client[] = []
  const open = async (connectionString: string) => {
    const client = new pg.Client({ connectionString })
    // A client killed by a test or by DROP DATABASE must not crash the run.
    client.on('error', () => {})
    await client.connect()
    clients.push(client)
    return client
  }
  const admin = await open(db.url)
  await admin.query(schemaSql)
  await admin.query(installSql(config.fencing))
  const proxy = await startProxy(config, { logger: createLogger('silent') })
  const proxyUrl = urlThrough(db.url, proxy, pooled.password)
  return {
    db,
    proxy,
    fencing: config.fencing,
    proxyUrl,
    connect: () => open(proxyUrl),
    connectDirect: () => open(db.url),
    close: async () => {
      await Promise.allSettled(clients.map((client) => client.end()))
      await proxy.close()
      await db.drop()
    },
  }
}

/** A connection through the proxy that presents `token` for the session. */
export async function leader(fenced: FencedDatabase, token: number): Promise<pg.Client> {
  const client = await fenced.connect()
  await client.query(`SET app.fencing_token = ${token}`)
  return client
}

/** Resolves once `pid` waits on a lock; every poll is a query, never a timed sleep alone. */
export async function waitUntilBlocked(observer: pg.Client, pid: number): Promise<void> {
  for (;;) {
    const { rows } = await observer.query(
      `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`,
      [pid],
    )
    if (rows[0]?.wait_event_type === 'Lock') return
  }
}
