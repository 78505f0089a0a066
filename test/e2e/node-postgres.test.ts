import { createHash, randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { sendCancelRequest } from './support/wire.js'
import { waitFor } from './support/wait.js'

let db: TestDatabase
let proxy: TestProxy
const clients: pg.Client[] = []

beforeAll(async () => {
  db = await createTestDatabase('e2e_node_postgres')
  proxy = await startTestProxy({}, db.url)
})

afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.end().catch(() => {})))
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

async function connect(applicationName = 'pgfence-e2e-pg'): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url(), application_name: applicationName })
  clients.push(client)
  await client.connect()
  return client
}

describe('node-postgres through the proxy', () => {
  test('a named prepared statement is parsed once and executed many times', async () => {
    const client = await connect()
    const doubled: number[] = []
    for (const value of [1, 2, 21]) {
      const result = await client.query({
        name: 'double-it',
        text: 'SELECT $1::int * 2 AS doubled',
        values: [value],
      })
      doubled.push(result.rows[0].doubled)
    }
    expect(doubled).toEqual([2, 4, 42])
    const prepared = await client.query(
      "SELECT statement FROM pg_prepared_statements WHERE name = 'double-it'",
    )
    expect(prepared.rows).toEqual([{ statement: 'SELECT $1::int * 2 AS doubled' }])
  })

  test('without fenced tables, standard_conforming_strings may be turned off', async () => {
    const client = new pg.Client({ connectionString: proxy.url() })
    await client.connect()
    // In one transaction: under transaction pooling a session SET lasts until its end.
    await client.query('BEGIN')
    await client.query('SET standard_conforming_strings = off')
    expect((await client.query("SELECT 'a\\'b' AS v")).rows).toEqual([{ v: "a'b" }])
    await client.query('COMMIT')
    await client.end()
  })

  test('transactions commit, roll back, and stay aborted after an error', async () => {
    const client = await connect()
    await client.query('CREATE TABLE ledger (id int PRIMARY KEY)')
    await client.query('BEGIN')
    await client.query('INSERT INTO ledger VALUES (1)')
    await client.query('ROLLBACK')
    await client.query('BEGIN')
    await client.query('INSERT INTO ledger VALUES (2)')
    await client.query('COMMIT')
    await client.query('BEGIN')
    await expect(client.query('INSERT INTO ledger VALUES (2)')).rejects.toMatchObject({
      code: '23505',
    })
    await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' })
    const rollback = await client.query('COMMIT')
    expect(rollback.command).toBe('ROLLBACK')
    const rows = await client.query('SELECT id FROM ledger ORDER BY id')
    expect(rows.rows).toEqual([{ id: 2 }])
  })

  test('a 10 MB text value makes the round trip intact', async () => {
    const client = await connect()
    const value = randomBytes(5 * 1024 * 1024).toString('hex')
    const result = await client.query('SELECT $1::text AS echoed, md5($1::text) AS digest', [value])
    expect(result.rows[0].echoed.length).toBe(value.length)
    expect(result.rows[0].echoed === value).toBe(true)
    expect(result.rows[0].digest).toBe(createHash('md5').update(value).digest('hex'))
  })

  test('a 50k-row result arrives complete', async () => {
    const client = await connect()
    const result = await client.query(
      "SELECT i, repeat('x', 20) AS pad FROM generate_series(1, 50000) i",
    )
    expect(result.rowCount).toBe(50000)
    expect(result.rows[49999]).toEqual({ i: 50000, pad: 'x'.repeat(20) })
  })

  test('a CancelRequest on a new connection to the proxy cancels the running query', async () => {
    const client = await connect('pgfence-e2e-cancel')
    const sleeping = client.query('SELECT pg_sleep(30)')
    const failure = sleeping.then(
      () => null,
      (error: unknown) => error,
    )
    await waitFor(async () => {
      const { rows } = await adminQuery(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgfence-e2e-cancel' AND query LIKE 'SELECT pg_sleep%' AND state = 'active'",
      )
      return rows.length === 1
    })
    const started = Date.now()
    const { processID, secretKey } = client as unknown as { processID: number; secretKey: number }
    await sendCancelRequest(proxy.port, processID, secretKey)
    expect(await failure).toMatchObject({ code: '57014' })
    expect(Date.now() - started).toBeLessThan(5000)
    const after = await client.query('SELECT 1 AS still_usable')
    expect(after.rows).toEqual([{ still_usable: 1 }])
  })
})
