import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { SCHEMA_VERSION } from '../../src/schema/schema-version.js'
import type { TestDatabase } from '../support/database.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { databaseWithTables, installPreviousSchema, migrateWith, schemaComment } from './support.js'

// Each earlier release's schema, with fenced rows, a raised resource fence and issued tokens,
// upgraded in place by this migrate: everything is kept and fencing works as before.

let db: TestDatabase
let admin: pg.Client
let app: pg.Client

async function databaseWithSchema(version: number): Promise<void> {
  ;({ db, admin } = await databaseWithTables(`schema_upgrade_${version}`))
  await installPreviousSchema(admin, version)
  app = new pg.Client({ connectionString: db.url })
  await app.connect()
}

async function dropDatabase(): Promise<void> {
  await app?.end()
  await admin?.end()
  await db?.drop()
}

/** Everything the upgrade must keep. */
const state = async () => ({
  invoices: (await admin.query('SELECT id, status, fencing_token FROM invoices ORDER BY id')).rows,
  ledger: (await admin.query('SELECT id, epoch FROM billing."Ledger" ORDER BY id')).rows,
  resources: (await admin.query('SELECT resource, token FROM pgfence.resource_fences')).rows,
  rowFences: (
    await admin.query('SELECT relid::regclass::text, col FROM pgfence.row_fences ORDER BY 1')
  ).rows,
  gates: (await admin.query('SELECT relid::regclass::text, resource FROM pgfence.resource_gates'))
    .rows,
  lastIssued: (await admin.query('SELECT pgfence.last_issued_token() AS t')).rows[0].t,
  triggers: (
    await admin.query(`SELECT tgrelid::regclass::text AS rel, tgname FROM pg_trigger
                        WHERE tgname LIKE 'pgfence%' ORDER BY 1, 2`)
  ).rows,
})

describe.each([
  { version: 1, mark: null },
  { version: 2, mark: 'pgfence schema version 2' },
])('from schema version $version', ({ version, mark }) => {
  beforeAll(() => databaseWithSchema(version))
  afterAll(dropDatabase)

  test('migrate upgrades it in place, keeping fences, fence columns and tokens', async () => {
    const tokens = []
    for (let i = 0; i < 3; i++)
      tokens.push(BigInt((await app.query('SELECT pgfence.next_token() AS t')).rows[0].t))
    const [first, second, third] = tokens as [bigint, bigint, bigint]
    await app.query(`SET app.fencing_token = '${second}'`)
    await app.query("INSERT INTO invoices (id, status) VALUES (1, 'PENDING')")
    await app.query('INSERT INTO billing."Ledger" (id, amount) VALUES (1, 10)')
    await app.query("INSERT INTO payouts VALUES (1, 'paid')")
    const before = await state()
    expect(before.invoices).toEqual([{ id: 1, status: 'PENDING', fencing_token: String(second) }])
    expect(before.resources).toEqual([{ resource: 'nightly-billing', token: String(second) }])
    expect(before.lastIssued).toBe(String(third))
    expect(await schemaComment(admin)).toBe(mark)

    const upgraded = await migrateWith(db.url)
    expect(upgraded.err).toBe('')
    expect(upgraded.code).toBe(0)
    expect(upgraded.out).toContain(
      `pgfence migrate: pgfence schema upgraded from version ${version} to ${SCHEMA_VERSION}, fences and tokens kept\n`,
    )
    expect(await state()).toEqual(before)
    expect(await schemaComment(admin)).toBe(`pgfence schema version ${SCHEMA_VERSION}`)
    // The sequence goes on where it was.
    const next = BigInt((await app.query('SELECT pgfence.next_token() AS t')).rows[0].t)
    expect(next).toBe(third + 1n)

    // Fencing works as before: an older token is refused, a newer one is written.
    await app.query(`SET app.fencing_token = '${first}'`)
    expect(await sqlstateOf(app.query("UPDATE invoices SET status = 'PAID' WHERE id = 1"))).toBe(
      'PF409',
    )
    expect(await sqlstateOf(app.query("UPDATE payouts SET note = 'again'"))).toBe('PF409')
    expect(await sqlstateOf(app.query('UPDATE invoices SET fencing_token = 1 WHERE id = 1'))).toBe(
      'PF501',
    )
    await app.query(`SET app.fencing_token = '${next}'`)
    // The upgraded row trigger admits an issued token without its slow path, check_row.
    await app.query("BEGIN; SET LOCAL track_functions = 'pl'")
    await app.query("UPDATE invoices SET status = 'PAID' WHERE id = 1")
    const checkRow = await app.query(`SELECT count(*)::int AS n FROM pg_stat_xact_user_functions
                                     WHERE schemaname = 'pgfence' AND funcname = 'check_row'`)
    await app.query('COMMIT')
    expect(checkRow.rows[0].n).toBe(0)
    await app.query("UPDATE payouts SET note = 'again'")
    const after = await state()
    expect(after.invoices).toEqual([{ id: 1, status: 'PAID', fencing_token: String(next) }])
    expect(after.resources).toEqual([{ resource: 'nightly-billing', token: String(next) }])

    // Running it again changes nothing and says nothing of versions.
    const again = await migrateWith(db.url)
    expect(again.code).toBe(0)
    expect(again.out).not.toContain('schema')
  })

  test('a schema newer than this pgfence is never downgraded', async () => {
    const newer = SCHEMA_VERSION + 1
    await admin.query(`COMMENT ON SCHEMA pgfence IS 'pgfence schema version ${newer}'`)
    const refused = await migrateWith(db.url)
    expect(refused.code).toBe(1)
    expect(refused.err).toContain(
      `pgfence schema version ${newer} in this database is newer than this pgfence understands (${SCHEMA_VERSION})`,
    )
    expect(await schemaComment(admin)).toBe(`pgfence schema version ${newer}`)
    await admin.query(`COMMENT ON SCHEMA pgfence IS 'pgfence schema version ${SCHEMA_VERSION}'`)
  })
})
