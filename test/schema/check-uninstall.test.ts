import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { run as uninstall } from '../../src/cli/uninstall.js'
import { SCHEMA_VERSION } from '../../src/schema/schema-version.js'
import { capture } from '../support/capture.js'
import type { TestDatabase } from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy } from '../support/proxy.js'
import { waitFor } from '../e2e/support/wait.js'
import {
  databaseWithTables,
  installPreviousSchema,
  migrateWith,
  previousConfig,
  schemaComment,
} from './support.js'

let db: TestDatabase
let admin: pg.Client

beforeAll(async () => {
  ;({ db, admin } = await databaseWithTables('schema_check'))
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
})

const check = () => migrateWith(db.url, '--check')
const uninstallWith = (...args: string[]) =>
  capture(() => uninstall(['--config', previousConfig, '--database-url', db.url, ...args]))

/** What --check said, without its prefix and closing line. */
const differences = (out: string) =>
  out
    .split('\n')
    .filter((line) => line !== '' && !/ differences?: run pgfence migrate$/.test(line))
    .map((line) => line.replace(/^pgfence migrate --check: /, ''))

const pgfenceObjects = async () =>
  (
    await admin.query(`SELECT
      (SELECT count(*)::int FROM pg_trigger WHERE tgname LIKE 'pgfence%') AS triggers,
      (SELECT count(*)::int FROM pg_event_trigger WHERE evtname LIKE 'pgfence%') AS event_triggers,
      pg_catalog.to_regnamespace('pgfence') IS NOT NULL AS schema,
      (SELECT count(*)::int FROM information_schema.columns
        WHERE column_name IN ('fencing_token', 'epoch')) AS fence_columns`)
  ).rows[0]

test('--check: a database where migrate never ran differs by its schema and fence columns', async () => {
  const result = await check()
  expect(result.code).toBe(1)
  expect(differences(result.out)).toEqual([
    'no pgfence schema',
    'fenced table invoices has no fence column fencing_token',
    'fenced table billing."Ledger" has no fence column epoch',
  ])
  expect(result.out).toMatch(/pgfence migrate --check: 3 differences: run pgfence migrate\n$/)
  expect(await pgfenceObjects()).toMatchObject({ schema: false, fence_columns: 0 })
})

test('--check: the previous release, a dropped trigger and a changed fence column differ', async () => {
  await installPreviousSchema(admin)
  expect(differences((await check()).out)).toEqual([
    `pgfence schema version 1 in this database, this pgfence needs ${SCHEMA_VERSION}`,
  ])
  expect((await migrateWith(db.url)).code).toBe(0)
  const ok = await check()
  expect(ok).toEqual({
    code: 0,
    out: `pgfence migrate --check: OK: pgfence schema version ${SCHEMA_VERSION}, fence columns and triggers as the config wants them\n`,
    err: '',
  })
  await admin.query(
    'ALTER TABLE invoices ALTER COLUMN fencing_token DROP DEFAULT; ' +
      'DROP TRIGGER pgfence_fence_row ON billing."Ledger"; ' +
      'DROP TRIGGER pgfence_resource_gate ON payouts; ' +
      'CREATE TABLE billing.ledger_2026 () INHERITS (billing."Ledger")',
  )
  const result = await check()
  expect(result.code).toBe(1)
  expect(differences(result.out)).toEqual([
    'fence column invoices.fencing_token: set DEFAULT 0',
    'fenced table billing."Ledger" has no enabled fence trigger',
    'member table "payouts" of resource nightly-billing has no gate triggers',
  ])
  expect((await migrateWith(db.url)).code).toBe(0)
  expect((await check()).code).toBe(0)
})

test('uninstall: --dry-run changes nothing; refused while a proxy fences the database', async () => {
  const before = await pgfenceObjects()
  expect(before).toMatchObject({ schema: true, event_triggers: 1, fence_columns: 3 })
  const dry = await uninstallWith('--dry-run')
  expect(dry.code).toBe(0)
  expect(dry.out).toContain('DROP SCHEMA IF EXISTS pgfence CASCADE;')
  expect(dry.out).not.toContain('DROP COLUMN')
  expect(await pgfenceObjects()).toEqual(before)

  const proxy = await startTestProxy(
    { fencing: { tables: [{ name: 'invoices' }], resources: [] } },
    db.url,
  )
  const client = new pg.Client({ connectionString: proxy.url() })
  await client.connect()
  try {
    const refused = await uninstallWith()
    expect(refused.code).toBe(1)
    expect(refused.err).toMatch(
      /^pgfence uninstall: a pgfence proxy fences this database \(its sessions: pid \d+\): stop it or point it elsewhere first; nothing was changed\n$/,
    )
    expect(await pgfenceObjects()).toEqual(before)
  } finally {
    await client.end()
    await proxy.close()
  }
  // The session that held the proxy's lock ends on the server soon after the client.
  const deadline = Date.now() + 30_000
  let result = await uninstallWith()
  while (result.code !== 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    result = await uninstallWith()
  }
  expect(result).toMatchObject({ code: 0, err: '' })
  expect(result.out).toContain('pgfence schema and triggers removed; fence columns kept')
  expect(await pgfenceObjects()).toEqual({
    triggers: 0,
    event_triggers: 0,
    schema: false,
    fence_columns: 3,
  })
})

test('uninstall: refused while a pool keeps the server connection of a client that left', async () => {
  const before = await pgfenceObjects()
  const proxy = await startTestProxy(
    {
      fencing: { tables: [{ name: 'invoices' }], resources: [] },
      pool: { mode: 'session', size: 1 },
      auth: { file: writeUserlist() },
    },
    db.url,
  )
  try {
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    })
    await client.connect()
    await client.query('SELECT 1')
    await client.end()
    // The pool resets the connection (DISCARD ALL releases advisory locks) and keeps it; the
    // next client, whose login runs no check (one a minute), gets it once the reset is over.
    const next = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
    await next.connect()
    try {
      const refused = await uninstallWith()
      expect(refused.code).toBe(1)
      expect(refused.err).toMatch(/^pgfence uninstall: a pgfence proxy fences this database/)
      expect(await pgfenceObjects()).toEqual(before)
    } finally {
      await next.end()
    }
  } finally {
    await proxy.close()
  }
  // A connection still being reset when the pool closed ends on the server soon after.
  await waitFor(async () => !(await proxyLockHeld()), { what: "the pool's sessions to end" })
})

/** Whether a session holds an advisory lock in the database (a proxy's presence lock). */
async function proxyLockHeld(): Promise<boolean> {
  const { rows } = await admin.query(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = " +
      '(SELECT oid FROM pg_database WHERE datname = current_database())',
  )
  return rows[0].n > 0
}

test('uninstall is idempotent; --drop-fence-columns drops the fence columns too', async () => {
  expect((await uninstallWith()).code).toBe(0)
  // Installed again, it is a new schema of this version.
  expect((await migrateWith(db.url)).code).toBe(0)
  expect(await schemaComment(admin)).toBe(`pgfence schema version ${SCHEMA_VERSION}`)
  // An object of the database's own that uses pgfence: named, and nothing is removed.
  await admin.query('CREATE VIEW last_token AS SELECT pgfence.last_issued_token() AS token')
  const installed = await pgfenceObjects()
  const refused = await uninstallWith('--drop-fence-columns')
  expect(refused.code).toBe(1)
  expect(refused.err).toContain(
    'objects of the database depend on the pgfence schema: view last_token',
  )
  expect(await pgfenceObjects()).toEqual(installed)
  await admin.query('DROP VIEW last_token')
  for (let run = 0; run < 2; run++) {
    const result = await uninstallWith('--drop-fence-columns')
    expect(result).toMatchObject({ code: 0, err: '' })
    expect(result.out).toContain('pgfence schema, triggers and fence columns removed')
    expect(await pgfenceObjects()).toEqual({
      triggers: 0,
      event_triggers: 0,
      schema: false,
      fence_columns: 0,
    })
  }
  // The tables and their rows stay.
  const { rows } = await admin.query('SELECT count(*)::int AS n FROM billing.ledger_2026')
  expect(rows).toEqual([{ n: 0 }])
})
