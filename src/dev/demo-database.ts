import pg from 'pg'
import type { FencingConfig } from '../config/schema.js'
import { quoteIdent } from '../rewrite/sql-text.js'
import { installSql } from '../schema/install.js'

export const demoDatabase = 'pgfence_demo'

const demoSchemaSql = `
-- The fence triggers of an earlier start would refuse the reset below.
SET pgfence.maintenance = on;
CREATE TABLE IF NOT EXISTS invoices (
  id bigint PRIMARY KEY,
  status text NOT NULL,
  amount_cents bigint,
  fencing_token bigint NOT NULL DEFAULT 0
);
-- Reset on every start, so the try-it always begins from the same state.
INSERT INTO invoices (id, status, amount_cents, fencing_token) VALUES (99, 'PENDING', NULL, 100)
ON CONFLICT (id) DO UPDATE
  SET status = excluded.status, amount_cents = excluded.amount_cents,
      fencing_token = excluded.fencing_token;
`

/**
 * The URL of a session that writes as if no fence were installed (pgfence.maintenance on, as the
 * superuser the demo runs as): the rounds that show what happens without pgfence.
 */
export function unfencedUrl(url: string): string {
  const unfenced = new URL(url)
  unfenced.searchParams.set('options', '-c pgfence.maintenance=on')
  return unfenced.toString()
}

/** One short-lived connection for `work`, closed whatever happens. */
export async function withClient<T>(
  url: string,
  work: (client: pg.Client) => Promise<T>,
): Promise<T> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

/** The name of the database a URL names. */
function databaseOf(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1))
}

/**
 * Creates the database `databaseUrl` names if missing (connected to `adminUrl`), its invoices
 * table and row 99, the tables and rows of `moreSql` (run under maintenance too), and then the
 * fence schema, which fences them all.
 */
export async function prepareDemoDatabase(
  adminUrl: string,
  databaseUrl: string,
  fencing: FencingConfig,
  moreSql = '',
): Promise<void> {
  const database = databaseOf(databaseUrl)
  await withClient(adminUrl, async (client) => {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [
      database,
    ])
    if (rowCount === 0) await client.query(`CREATE DATABASE ${quoteIdent(database)}`)
  })
  await withClient(databaseUrl, async (client) => {
    await client.query(demoSchemaSql + moreSql)
    await client.query(installSql(fencing))
  })
}

/** Drops the database `databaseUrl` names, with any session still in it. */
export async function dropDemoDatabase(adminUrl: string, databaseUrl: string): Promise<void> {
  await withClient(adminUrl, async (client) => {
    await client.query(
      `DROP DATABASE IF EXISTS ${quoteIdent(databaseOf(databaseUrl))} WITH (FORCE)`,
    )
  })
}
