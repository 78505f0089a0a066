import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { DataTypes, Sequelize } from 'sequelize'
import { afterAll, beforeAll, expect, test, vi } from 'vitest'
import { run as explain } from '../../src/cli/explain.js'
import { run as migrate } from '../../src/cli/migrate.js'
import { capture } from '../support/capture.js'
import {
  createTestDatabase,
  maintenanceSession,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { startTestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'

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

/** migrate, its output without the replication line (tested on its own below). */
const migrated = async (args: string[]) => {
  const result = await capture(() => migrate(args))
  return { ...result, out: result.out.replace(/^pgfence migrate: replication: .*\n/m, '') }
}

/** A config file of its own in the test's directory. */
function configWith(name: string, yaml: string): string {
  const file = join(dir, `${name}.yaml`)
  writeFileSync(file, yaml)
  return file
}

/** The fence column as the catalog has it. */
const columnOf = async (table: string, column = 'fencing_token') =>
  (
    await admin.query(
      `SELECT data_type, is_nullable, column_default FROM information_schema.columns
        WHERE table_name = $1 AND column_name = $2`,
      [table, column],
    )
  ).rows[0]

test('migrate adds missing fence columns and the helpers, idempotently and concurrently', async () => {
  const args = ['--config', configFile, '--database-url', db.url]
  const runs = await Promise.all([migrated(args), migrated(args)])
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
  const dry = await migrated(['--config', configFile, '--dry-run'])
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
    /^upstream: \/\*pgfence:token='7'\*\/ UPDATE invoices SET "fencing_token" = '7', id = 2 \/\*fencing_token='7'\*\/\nfenced: "invoices", with token '7' \(comment\)/,
  )
  const refused = await capture(() => explain(['--config', configFile, 'TRUNCATE invoices']))
  expect(refused.code).toBe(1)
  expect(refused.out).toMatch(
    /^refused: PF501 TRUNCATE is not supported on a fenced table\n {2}DETAIL: /,
  )
  const passed = await capture(() => explain(['--config', configFile, 'SELECT * FROM invoices']))
  expect(passed.out).toBe('passes through unchanged\n')
})

test('a fence column Sequelize created (nullable, no default) gets DEFAULT 0 and NOT NULL', async () => {
  const define = (s: Sequelize) =>
    s.define('Invoice', {
      id: { type: DataTypes.INTEGER, primaryKey: true },
      status: { type: DataTypes.TEXT, allowNull: false },
      fencing_token: { type: DataTypes.BIGINT },
    })
  const direct = new Sequelize(db.url, { logging: false })
  await define(direct).sync()
  await direct.close()
  expect(await columnOf('Invoices')).toEqual({
    data_type: 'bigint',
    is_nullable: 'YES',
    column_default: null,
  })
  const args = ['--config', configWith('sequelize', 'fencing:\n  tables:\n    - name: Invoices\n')]
  args.push('--database-url', db.url)
  const dry = await migrated([...args, '--dry-run'])
  expect(dry.out).toContain(
    'ALTER TABLE "public"."Invoices" ALTER COLUMN "fencing_token" SET DEFAULT 0, ALTER COLUMN "fencing_token" SET NOT NULL;\nSELECT pgfence.fence_table(\'"public"."Invoices"\'::regclass',
  )
  expect(await columnOf('Invoices')).toMatchObject({ is_nullable: 'YES' })
  expect(await migrated(args)).toEqual({
    code: 0,
    out: 'pgfence migrate: Invoices.fencing_token: set DEFAULT 0, NOT NULL\npgfence migrate: database is ready\n',
    err: '',
  })
  expect(await columnOf('Invoices')).toEqual({
    data_type: 'bigint',
    is_nullable: 'NO',
    column_default: '0',
  })
  expect((await migrated(args)).out).toBe('pgfence migrate: database is ready\n')
  // The INSERT Sequelize sends leaves the column out: its default is what the trigger sees.
  const proxy = await startTestProxy({ fencing: { tables: [{ name: 'Invoices' }] } }, db.url)
  const sequelize = new Sequelize(proxy.url(), { logging: false, pool: { max: 1 } })
  try {
    const Invoice = define(sequelize)
    await sequelize.transaction(async (transaction) => {
      await sequelize.query("SELECT set_config('app.fencing_token', '101', true)", { transaction })
      await Invoice.create({ id: 1, status: 'NEW' }, { transaction })
    })
  } finally {
    await sequelize.close()
    await proxy.close()
  }
  const { rows } = await admin.query('SELECT status, fencing_token FROM "Invoices"')
  expect(rows).toEqual([{ status: 'NEW', fencing_token: '101' }])
})

test('NULLs in an existing fence column: migrate refuses, and the fix it names works', async () => {
  await admin.query(
    'CREATE TABLE payments (id int PRIMARY KEY, fencing_token bigint); ' +
      'INSERT INTO payments VALUES (1, NULL), (2, NULL), (3, 7)',
  )
  const args = ['--config', configWith('payments', 'fencing:\n  tables:\n    - name: payments\n')]
  args.push('--database-url', db.url)
  const refused = await migrated(args)
  expect(refused.code).toBe(1)
  expect(refused.err).toMatch(
    /^pgfence migrate: fence column payments\.fencing_token is NULL in 2 rows, so it cannot be made NOT NULL: .*\npgfence migrate: nothing was changed\n$/,
  )
  expect(await columnOf('payments')).toMatchObject({ is_nullable: 'YES', column_default: null })
  const fix = /with (SET pgfence\.maintenance = on; UPDATE .* IS NULL);/.exec(refused.err)![1]!
  expect(fix).toBe(
    'SET pgfence.maintenance = on; UPDATE "public"."payments" SET "fencing_token" = 0 WHERE "fencing_token" IS NULL',
  )
  await queryOnce(db.url, fix)
  const fixed = await migrated(args)
  expect(fixed.out).toContain('pgfence migrate: payments.fencing_token: set DEFAULT 0, NOT NULL\n')

  // Once fenced, the fence trigger lets the same fix through only under maintenance.
  await admin.query(
    'ALTER TABLE payments ALTER COLUMN fencing_token DROP NOT NULL; ' +
      'UPDATE payments SET fencing_token = NULL WHERE id = 1',
  )
  const again = await migrated(args)
  expect(again.code).toBe(1)
  expect(again.err).toContain('payments.fencing_token is NULL in 1 row,')
  expect(await sqlstateOf(queryOnce(db.url, fix.replace(/^SET [^;]*; /, '')))).toBe('PF428')
  await queryOnce(db.url, fix)
  expect((await migrated(args)).out).toBe(
    'pgfence migrate: payments.fencing_token: set NOT NULL\npgfence migrate: database is ready\n',
  )
  const { rows } = await admin.query('SELECT id, fencing_token FROM payments ORDER BY id')
  expect(rows).toEqual([
    { id: 1, fencing_token: '0' },
    { id: 2, fencing_token: '0' },
    { id: 3, fencing_token: '7' },
  ])
})

test('a fence column of another type is refused, with the ALTER that makes it bigint', async () => {
  await admin.query('CREATE TABLE receipts (id int, fencing_token integer NOT NULL DEFAULT 0)')
  const args = ['--config', configWith('receipts', 'fencing:\n  tables:\n    - name: receipts\n')]
  args.push('--database-url', db.url)
  const refused = await migrated(args)
  expect(refused.code).toBe(1)
  const alter = 'ALTER TABLE "public"."receipts" ALTER COLUMN "fencing_token" TYPE bigint'
  expect(refused.err).toContain(
    `fence column receipts.fencing_token is integer, and fencing tokens are bigint: change its type (${alter})`,
  )
  expect(await columnOf('receipts')).toMatchObject({ data_type: 'integer' })
  await admin.query(alter)
  expect(await migrated(args)).toMatchObject({
    code: 0,
    out: 'pgfence migrate: database is ready\n',
  })
})

test('--token-start moves the token sequence up, never down; --dry-run prints its SQL', async () => {
  const args = ['--config', configFile, '--database-url', db.url]
  const next = async () =>
    BigInt((await admin.query('SELECT pgfence.next_token() AS token')).rows[0].token)
  // next_token()'s tokens start above 2^62 + timeline × 2^40: a lower N is below them already.
  const base = (
    await admin.query(
      'SELECT power(2::numeric, 62) + pgfence.timeline() * power(2::numeric, 40) AS base',
    )
  ).rows[0].base.split('.')[0] as string
  const low = await migrated([...args, '--token-start', '500'])
  expect(low.out).toContain(
    `pgfence migrate: token sequence left as it is: the next token, ${BigInt(base) + 1n}, is above 500 already\n`,
  )
  const start = BigInt(base) + 500n
  const moved = await migrated([...args, '--token-start', String(start)])
  expect(moved.out).toContain(
    `pgfence migrate: token sequence moved: the next token is ${start + 1n} (none was issued before)\n`,
  )
  expect(await next()).toBe(start + 1n)
  const kept = await migrated([...args, '--token-start', String(start - 100n)])
  expect(kept.out).toContain(
    `pgfence migrate: token sequence left as it is: the next token, ${start + 2n}, is above ${start - 100n} already\n`,
  )
  expect(await next()).toBe(start + 2n)
  const dry = await migrated([...args, '--dry-run', '--token-start', '900'])
  expect(dry.out).toMatch(
    /\nCOMMIT;\nBEGIN;\n.*900 - \(.*pg_catalog\.setval\('pgfence\.token_seq', seq\)/s,
  )
  expect(await next()).toBe(start + 3n)
  const beyond = await capture(() =>
    migrate([...args, '--token-start', String(BigInt(base) + 2n ** 40n)]),
  )
  expect(beyond.code).toBe(1)
  expect(beyond.err).toContain('is above the tokens of this timeline')
  for (const bad of ['-1', '1.5', '9223372036854775807']) {
    expect((await migrated([...args, '--token-start', bad])).code).toBe(2)
  }
})
