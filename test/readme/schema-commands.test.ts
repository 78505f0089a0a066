import { afterAll, beforeAll, expect, test } from 'vitest'
import { SCHEMA_VERSION } from '../../src/schema/schema-version.js'
import { queryOnce, type TestDatabase } from '../support/database.js'
import { databaseWithTables, installPreviousSchema } from '../schema/support.js'
import { readmeBlock, runShell, shellCommands } from './readme-blocks.js'

// The README's upgrade and uninstall commands, as written, on a database with the previous
// release's schema.

/** The schema version of the release before this one. */
const PREVIOUS_VERSION = 2

let db: TestDatabase
let env: NodeJS.ProcessEnv

beforeAll(async () => {
  const created = await databaseWithTables('readme_schema')
  db = created.db
  await installPreviousSchema(created.admin, PREVIOUS_VERSION)
  await created.admin.end()
  env = { DIRECT_DATABASE_URL: db.url }
})

afterAll(async () => {
  await db?.drop()
})

test('schema-upgrade: --check says the version differs, migrate upgrades, --check says OK', async () => {
  const [check, migrate, checkAgain] = shellCommands(readmeBlock('schema-upgrade'))
  const before = await runShell(check!, env)
  expect(before).toMatchObject({
    code: 1,
    stdout: `pgfence migrate --check: pgfence schema version ${PREVIOUS_VERSION} in this database, this pgfence needs ${SCHEMA_VERSION}\npgfence migrate --check: 1 difference: run pgfence migrate\n`,
  })
  const migrated = await runShell(migrate!, env)
  expect(migrated, migrated.stderr).toMatchObject({ code: 0 })
  expect(migrated.stdout).toContain(
    `upgraded from version ${PREVIOUS_VERSION} to ${SCHEMA_VERSION}`,
  )
  const after = await runShell(checkAgain!, env)
  expect(after).toMatchObject({ code: 0, stderr: '' })
  expect(after.stdout).toMatch(/^pgfence migrate --check: OK: [^\n]*\n$/)
})

test('schema-uninstall: --dry-run prints the SQL, then uninstall removes the schema', async () => {
  const [dryRun, uninstall] = shellCommands(readmeBlock('schema-uninstall'))
  const dry = await runShell(dryRun!, env)
  expect(dry).toMatchObject({ code: 0, stderr: '' })
  expect(dry.stdout).toContain('DROP SCHEMA IF EXISTS pgfence CASCADE;')
  const removed = await runShell(uninstall!, env)
  expect(removed, removed.stderr).toMatchObject({ code: 0 })
  const { rows } = await queryOnce(
    db.url,
    "SELECT to_regnamespace('pgfence') AS schema, count(*)::int AS fence_columns FROM information_schema.columns WHERE column_name = 'fencing_token'",
  )
  expect(rows).toEqual([{ schema: null, fence_columns: 1 }])
})
