import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { capturingLogger } from '../fencing-e2e/support.js'
import {
  createTestDatabase,
  maintenanceSession,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { fencingConfig, installFencing, sqlstateOf } from './support.js'

// Each database's check finds which fenced tables have their row trigger as the config wants it.
// pgfence leaves those rows to the trigger; any other table it still checks in the statement.
// An INSERT without a column list tells the two apart: the trigger fences it, while pgfence's
// own rewrite needs the column list and refuses it (PF501).

let db: TestDatabase
let admin: pg.Client

const tables = ['ledger', 'disabled', 'strict']

beforeAll(async () => {
  db = await createTestDatabase('trigger_status')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  for (const table of tables) {
    await admin.query(`CREATE TABLE ${table} (id int PRIMARY KEY, note text)`)
  }
  await installFencing(db.url, fencingConfig({ tables: tables.map((name) => ({ name })) }))
  await admin.query('ALTER TABLE disabled DISABLE TRIGGER pgfence_fence_row')
  await admin.query(`CREATE TABLE bare (id int PRIMARY KEY, note text)`)
  for (const table of tables) {
    await admin.query(`INSERT INTO ${table} (id, note, fencing_token) VALUES (1, 'held', 100)`)
  }
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
})

describe('fence triggers, checked per database', () => {
  const logs: Record<string, unknown>[] = []
  let proxy: TestProxy
  let client: pg.Client

  beforeAll(async () => {
    // `strict` is migrated with requireToken on; the config now says off: its trigger is stale.
    const fencing: ConfigOverrides['fencing'] = {
      tables: [
        { name: 'ledger' },
        { name: 'disabled' },
        { name: 'strict', requireToken: false },
        { name: 'bare' },
      ],
    }
    proxy = await startTestProxy({ fencing }, db.url, { logger: capturingLogger(logs) })
    client = new pg.Client({ connectionString: proxy.url() })
    await client.connect()
    await client.query('SET app.fencing_token = 101')
  })

  afterAll(async () => {
    await client?.end()
    await proxy?.close()
  })

  test('a table with its trigger: its rows are left to the trigger', async () => {
    expect(await sqlstateOf(client.query("INSERT INTO ledger VALUES (2, 'new')"))).toBe('ok')
    const row = await admin.query('SELECT fencing_token FROM ledger WHERE id = 2')
    expect(row.rows).toEqual([{ fencing_token: '101' }])
    const stale = "/*fencing_token='7'*/ UPDATE ledger SET note = 'late' WHERE id = 1"
    expect(await sqlstateOf(client.query(stale))).toBe('PF409')
  })

  // A disabled trigger fences nothing; a stale one still fences every path, by its old rule.
  const logged: Record<string, string> = {
    disabled:
      'fenced table "disabled" has no enabled fence trigger in this database: pgfence checks the writes that name it, but writes by other paths (functions, views, triggers, partitions, direct connections) are not fenced; run pgfence migrate',
    strict:
      'fencing rule for "strict" changed (requireToken: false): run `pgfence migrate` to apply it to the database\'s triggers; until then the installed triggers keep the old rule',
  }

  test.each(['disabled', 'strict'])(
    '%s: pgfence checks the writes that name it, and logs the table at error',
    async (table) => {
      expect(await sqlstateOf(client.query(`INSERT INTO ${table} VALUES (2, 'new')`))).toBe('PF501')
      const stale = `/*fencing_token='7'*/ UPDATE ${table} SET note = 'late' WHERE id = 1`
      expect(await sqlstateOf(client.query(stale))).toBe('PF409')
      expect(await sqlstateOf(client.query(`UPDATE ${table} SET note = 'ok' WHERE id = 1`))).toBe(
        'ok',
      )
      const row = await admin.query(`SELECT note, fencing_token FROM ${table} WHERE id = 1`)
      expect(row.rows).toEqual([{ note: 'ok', fencing_token: '101' }])
      const errors = logs.filter((r) => r.level === 50 && r.table === table)
      expect(errors).toEqual([expect.objectContaining({ database: db.name, msg: logged[table] })])
    },
  )

  test('a table added to the config but never migrated: writes to it are refused (PF501)', async () => {
    const err = await client.query("UPDATE bare SET note = 'x' WHERE id = 1").then(
      () => null,
      (e: pg.DatabaseError) => e,
    )
    expect(err).toMatchObject({
      code: 'PF501',
      message: 'fenced table "bare" has no fence column fencing_token',
      hint: 'run pgfence migrate',
    })
    expect(await sqlstateOf(client.query('SELECT * FROM bare'))).toBe('ok')
    const errors = logs.filter((r) => r.level === 50 && r.table === 'bare')
    expect(errors).toEqual([
      expect.objectContaining({
        msg: expect.stringMatching(
          /^fenced table "bare" has no fence column fencing_token: .*run pgfence migrate$/,
        ),
      }),
    ])
  })

  test('no other table is logged', () => {
    const logged = logs.filter((r) => r.level === 50).map((r) => r.table)
    expect(logged.sort()).toEqual(['bare', 'disabled', 'strict'])
  })
})

describe('a database where pgfence migrate never ran', () => {
  const logs: Record<string, unknown>[] = []
  let bare: TestDatabase
  let proxy: TestProxy

  beforeAll(async () => {
    bare = await createTestDatabase('trigger_status_unmigrated')
    // Fence columns of its own, but no pgfence schema.
    await queryOnce(
      bare.url,
      'CREATE TABLE payments (id int PRIMARY KEY, fencing_token bigint NOT NULL DEFAULT 0);' +
        'CREATE TABLE jobs (id int PRIMARY KEY, state text);' +
        'INSERT INTO payments VALUES (1, 0); INSERT INTO jobs VALUES (1, null)',
    )
    const fencing: ConfigOverrides['fencing'] = {
      tables: [{ name: 'payments' }],
      resources: [{ tables: ['jobs'], resource: 'jobs' }],
    }
    proxy = await startTestProxy({ fencing }, bare.url, { logger: capturingLogger(logs) })
  })

  afterAll(async () => {
    await proxy?.close()
    await bare?.drop()
  })

  test('writes to its fenced tables are refused, saying to run migrate; the log says so once', async () => {
    for (let session = 0; session < 2; session++) {
      const client = new pg.Client({ connectionString: proxy.url() })
      await client.connect()
      try {
        await client.query('SET app.fencing_token = 5')
        for (const [table, sql] of [
          ['payments', 'UPDATE payments SET id = id WHERE id = 1'],
          ['jobs', "UPDATE jobs SET state = 'done' WHERE id = 1"],
        ] as const) {
          const err = await client.query(sql).then(
            () => null,
            (e: pg.DatabaseError) => e,
          )
          expect({ table, err }).toMatchObject({
            table,
            err: {
              code: 'PF501',
              message: 'pgfence migrate has not run in this database',
              hint: 'run pgfence migrate',
            },
          })
        }
        expect(await sqlstateOf(client.query('SELECT * FROM payments'))).toBe('ok')
      } finally {
        await client.end()
      }
    }
    const errors = logs.filter((r) => r.level === 50)
    expect(errors).toEqual([
      expect.objectContaining({
        database: bare.name,
        msg: 'pgfence migrate has not run in this database (it has no pgfence schema): writes to its fenced tables fail; run pgfence migrate',
      }),
    ])
  })
})
