import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { stringify } from 'yaml'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { SCHEMA_VERSION } from '../../src/schema/schema-version.js'
import { capturingLogger } from '../fencing-e2e/support.js'
import type { TestDatabase } from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { databaseWithTables, installPreviousSchema, migrateWith } from './support.js'

// One proxy in front of three databases: the previous release's schema (version 1), one newer
// than this pgfence, and this version's. Writes to fenced tables are refused in the first two,
// with an error that names the fix, and each is logged once.

const fencing: ConfigOverrides['fencing'] = {
  tables: [{ name: 'invoices' }, { name: 'billing."Ledger"', column: 'epoch' }],
  resources: [{ tables: ['payouts'], resource: 'nightly-billing' }],
}
const newer = SCHEMA_VERSION + 1
const logs: Record<string, unknown>[] = []
const databases: { db: TestDatabase; admin: pg.Client }[] = []
let older: TestDatabase, newest: TestDatabase, current: TestDatabase
let proxy: TestProxy
const dir = mkdtempSync(join(tmpdir(), 'pgfence-version-'))
const configFile = join(dir, 'pgfence.yaml')

beforeAll(async () => {
  for (const label of ['version_older', 'version_newer', 'version_current']) {
    databases.push(await databaseWithTables(label))
  }
  const [a, b, c] = databases as [
    (typeof databases)[0],
    (typeof databases)[0],
    (typeof databases)[0],
  ]
  ;[older, newest, current] = [a.db, b.db, c.db]
  await installPreviousSchema(a.admin)
  for (const { db } of [b, c]) expect((await migrateWith(db.url)).code).toBe(0)
  await b.admin.query(`COMMENT ON SCHEMA pgfence IS 'pgfence schema version ${newer}'`)
  // From a file, so that a reload checks every database again.
  const upstream = new URL(a.db.url)
  const config: ConfigOverrides = {
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: upstream.hostname, port: Number(upstream.port || 5432) },
    fencing,
  }
  writeFileSync(configFile, stringify(config))
  proxy = await startTestProxy(config, a.db.url, { logger: capturingLogger(logs), configFile })
})

afterAll(async () => {
  await proxy?.close()
  rmSync(dir, { recursive: true, force: true })
  for (const { db, admin } of databases) {
    await admin.end()
    await db.drop()
  }
})

const writes = [
  "INSERT INTO invoices (id, status) VALUES (1, 'NEW') ON CONFLICT DO NOTHING",
  'UPDATE billing."Ledger" SET amount = 1',
  "UPDATE payouts SET note = 'x'",
]

/** Each write's error (null when it passed) in two sessions of their own, and a read's. */
async function tryWrites(db: TestDatabase): Promise<unknown[]> {
  const outcomes: unknown[] = []
  for (let session = 0; session < 2; session++) {
    const client = new pg.Client({ connectionString: proxy.url(undefined, db.name) })
    await client.connect()
    try {
      await client.query('SET app.fencing_token = 5')
      for (const sql of writes) {
        outcomes.push(
          await client.query(sql).then(
            () => null,
            (err: pg.DatabaseError) => ({ code: err.code, message: err.message, hint: err.hint }),
          ),
        )
      }
      expect(await sqlstateOf(client.query('SELECT * FROM invoices'))).toBe('ok')
    } finally {
      await client.end()
    }
  }
  return outcomes
}

const errorsOf = (db: TestDatabase) =>
  logs.filter((r) => r.level === 50 && r.database === db.name).map((r) => r.msg)

test('an older schema: fenced writes are refused, saying to run pgfence migrate, logged once', async () => {
  const message = `pgfence schema version 1 in this database, this pgfence needs ${SCHEMA_VERSION}`
  const hint = 'run pgfence migrate: it upgrades the schema in place, keeping fences and tokens'
  expect(await tryWrites(older)).toEqual(Array(6).fill({ code: 'PF501', message, hint }))
  expect(errorsOf(older)).toEqual([
    `${message}: writes to fenced tables through pgfence are refused until the schema is upgraded; ${hint}`,
  ])
})

test('a newer schema: fenced writes are refused, naming the release to run, logged once', async () => {
  const message = `pgfence schema version ${newer} in this database, this pgfence needs ${SCHEMA_VERSION}`
  const hint = `run a pgfence release that understands schema version ${newer}`
  expect(await tryWrites(newest)).toEqual(Array(6).fill({ code: 'PF501', message, hint }))
  expect(errorsOf(newest)).toHaveLength(1)
  expect(errorsOf(newest)[0]).toMatch(new RegExp(`^${message}: .*; ${hint}$`))
})

test('this version: the same writes pass, and nothing is logged', async () => {
  expect(await tryWrites(current)).toEqual(Array(6).fill(null))
  expect(errorsOf(current)).toEqual([])
})

test('upgraded by pgfence migrate, the older database takes the writes after a reload', async () => {
  const upgraded = await migrateWith(older.url)
  expect(upgraded.out).toContain(`upgraded from version 1 to ${SCHEMA_VERSION}`)
  await proxy.reload()
  expect(await tryWrites(older)).toEqual(Array(6).fill(null))
})
