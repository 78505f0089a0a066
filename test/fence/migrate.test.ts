import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, expect, test, vi } from 'vitest'
import { run as explain } from '../../src/cli/explain.js'
import { run as migrate } from '../../src/cli/migrate.js'
import { capture } from '../support/capture.js'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'

let db: TestDatabase
let admin: pg.Client
let dir: string
let configFile: string

beforeAll(async () => {
  db = await createTestDatabase('fence_migrate')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(
    'CREATE SCHEMA billing; CREATE TABLE invoices (id int); CREATE TABLE billing."Ledger" (id int)',
  )
  dir = mkdtempSync(join(tmpdir(), 'pgfence-migrate-'))
  configFile = join(dir, 'pgfence.yaml')
  writeFileSync(
    configFile,
    'fencing:\n  tables:\n    - name: invoices\n    - name: billing."Ledger"\n      column: epoch\n',
  )
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
  rmSync(dir, { recursive: true, force: true })
})

test('migrate adds missing fence columns and the helpers, idempotently and concurrently', async () => {
  const args = ['--config', configFile, '--database-url', db.url]
  const runs = await Promise.all([capture(() => migrate(args)), capture(() => migrate(args))])
  expect(runs.map((r) => r.code)).toEqual([0, 0])
  const again = await capture(() => migrate(args))
  expect(again.code).toBe(0)
  // The test server streams to no standby.
  expect(again.out).toContain('pgfence migrate: replication: none: ')
  const columns = await admin.query(`
    SELECT table_schema, table_name, column_name, data_type, is_nullable, column_default
      FROM information_schema.columns
     WHERE column_name IN ('fencing_token', 'epoch') ORDER BY table_schema`)
  expect(columns.rows).toEqual([
    {
      table_schema: 'billing',
      table_name: 'Ledger',
      column_name: 'epoch',
      data_type: 'bigint',
      is_nullable: 'NO',
      column_default: '0',
    },
    {
      table_schema: 'public',
      table_name: 'invoices',
      column_name: 'fencing_token',
      data_type: 'bigint',
      is_nullable: 'NO',
      column_default: '0',
    },
  ])
  const functions = await admin.query(
    "SELECT proname FROM pg_proc WHERE pronamespace = 'pgfence'::regnamespace ORDER BY proname",
  )
  expect(functions.rows.map((r) => r.proname)).toEqual(
    expect.arrayContaining([
      'advance',
      'check_row',
      'fence_fencing_token',
      'next_token',
      'refuse',
      'stale',
      'token',
    ]),
  )
})

test('migrate --dry-run prints the SQL without a database; bad arguments exit 2', async () => {
  const dry = await capture(() => migrate(['--config', configFile, '--dry-run']))
  expect(dry.code).toBe(0)
  expect(dry.out).toMatch(/^BEGIN;/)
  expect(dry.out).toContain(
    `SELECT pgfence.fence_table('"billing"."Ledger"'::regclass, 'epoch', 'app.fencing_token', true, false);`,
  )
  const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
  try {
    expect(await migrate(['--config', configFile])).toBe(2)
    expect(await explain(['--config', configFile])).toBe(2)
  } finally {
    stderr.mockRestore()
  }
})

test('explain prints the upstream statement, a refusal, or pass-through', async () => {
  const fenced = await capture(() =>
    explain(['--config', configFile, "UPDATE invoices SET id = 2 /*fencing_token='7'*/"]),
  )
  expect(fenced.code).toBe(0)
  expect(fenced.out).toMatch(
    // The row fence is the table's trigger: the statement gets the token marker, and the fence
    // column set to the token for the trigger's cheapest check.
    /^upstream: \/\*pgfence:token='7'\*\/ UPDATE invoices SET "fencing_token" = '7', id = 2 \/\*fencing_token='7'\*\/\n$/,
  )
  const refused = await capture(() => explain(['--config', configFile, 'TRUNCATE invoices']))
  expect(refused.out).toMatch(
    /^refused: PF501 TRUNCATE is not supported on a fenced table\n {2}DETAIL: /,
  )
  const passed = await capture(() => explain(['--config', configFile, 'SELECT * FROM invoices']))
  expect(passed.out).toBe('passes through unchanged\n')
})
