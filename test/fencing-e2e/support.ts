import { Writable } from 'node:stream'
import pg from 'pg'
import { pino } from 'pino'
import { parseConfig } from '../../src/config/load.js'
import { startProxy } from '../../src/proxy/proxy-server.js'
import { installSql } from '../../src/schema/install.js'
import { maintenanceSession, type TestDatabase } from '../support/database.js'
import { pooledRun, relayUnderTest, urlThrough } from '../support/proxy.js'
export { sqlstateOf } from '../support/sqlstate.js'

/** The `invoices` table of the product story, fenced on `fencing_token`. */
const fencingSection = { tables: [{ name: 'invoices' }] }

export interface Invoice {
  status: string
  fencing_token: string
}

/** A fresh database behind an in-process proxy that fences `invoices`, with its log captured. */
export interface FencedStack {
  db: TestDatabase
  /** Direct superuser connection to the database, past the proxy. */
  admin: pg.Client
  /** URL of the database through the proxy. */
  url: string
  /** Every JSON log record the proxy has written so far. */
  logRecords: Record<string, unknown>[]
  invoice(id: number): Promise<Invoice | undefined>
  /** Puts `id` back to PENDING, amount 0, with the given committed token. */
  seed(id: number, token?: string): Promise<void>
  close(): Promise<void>
}

/** A pino logger at info level whose JSON lines land in `records`. */
export function capturingLogger(records: Record<string, unknown>[]): pino.Logger {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (line.trim() !== '') records.push(JSON.parse(line) as Record<string, unknown>)
      }
      done()
    },
  })
  return pino({ level: 'info' }, sink)
}

export async function startFencedStack(db: TestDatabase): Promise<FencedStack> {
  const admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  const pooled = pooledRun(db.url)
  const config = parseConfig({
    ...pooled.overrides,
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: db.host, port: db.port, tls: 'disable' },
    fencing: fencingSection,
    relay: relayUnderTest(),
  })
  await admin.query(
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, amount int NOT NULL DEFAULT 0)',
  )
  await admin.query(installSql(config.fencing))
  const logRecords: Record<string, unknown>[] = []
  const proxy = await startProxy(config, { logger: capturingLogger(logRecords) })
  return {
    db,
    admin,
    url: urlThrough(db.url, proxy, pooled.password),
    logRecords,
    invoice: async (id) =>
      (await admin.query('SELECT status, fencing_token FROM invoices WHERE id = $1', [id])).rows[0],
    seed: async (id, token = '100') =>
      void (await admin.query(
        `INSERT INTO invoices (id, status, fencing_token) VALUES ($1, 'PENDING', $2)
         ON CONFLICT (id) DO UPDATE SET status = 'PENDING', amount = 0, fencing_token = $2`,
        [id, token],
      )),
    close: async () => {
      await proxy.close()
      await admin.end()
      await db.drop()
    },
  }
}

/** What a client saw for one statement: its row count, or the error fields it received. */
export type Outcome =
  | { code: 'ok'; rowCount: number }
  | {
      code: string
      detail?: string
      hint?: string
      schema?: string
      table?: string
      column?: string
    }

/** The outcome of a node-postgres query. */
export async function pgOutcome(query: Promise<pg.QueryResult>): Promise<Outcome> {
  try {
    return { code: 'ok', rowCount: (await query).rowCount ?? -1 }
  } catch (err) {
    if (!(err instanceof pg.DatabaseError)) throw err
    const { code = '', detail, hint, schema, table, column } = err
    return { code, detail, hint, schema, table, column }
  }
}
