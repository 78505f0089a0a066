import pg from 'pg'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { createTestDatabase, adminQuery, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { sendCancelRequest } from '../e2e/support/wire.js'
import { backendsOf, POOL_PASSWORD, writeUserlist } from './support.js'

const POOL_SIZE = 4
let db: TestDatabase
let proxy: TestProxy

const url = (password = POOL_PASSWORD) => proxy.url('postgres', db.name, password)

beforeAll(async () => {
  db = await createTestDatabase('pool_session')
  proxy = await startTestProxy({
    pool: { mode: 'session', size: POOL_SIZE },
    auth: { file: writeUserlist() },
  })
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

describe('session pooling', () => {
  test('node-postgres logs in with the userlist password and queries', async () => {
    const client = new pg.Client({ connectionString: url() })
    await client.connect()
    const { rows } = await client.query('SELECT current_user AS name, 1 + 1 AS two')
    await client.end()
    expect(rows[0]).toEqual({ name: 'postgres', two: 2 })
  })

  test('a wrong password is 28P01 in PostgreSQL words, an unknown user too', async () => {
    for (const [user, password] of [
      ['postgres', 'wrong'],
      ['nobody', 'pool-secret'],
    ]) {
      const client = new pg.Client({ connectionString: proxy.url(user, db.name, password) })
      await expect(client.connect()).rejects.toMatchObject({
        code: '28P01',
        message: `password authentication failed for user "${user}"`,
      })
    }
  })

  test('200 short sessions queue for a pool of 4', async () => {
    const sessions = Array.from({ length: 200 }, async (_, index) => {
      const client = new pg.Client({ connectionString: url() })
      await client.connect()
      try {
        return (await client.query('SELECT $1::int AS n', [index])).rows[0].n
      } finally {
        await client.end()
      }
    })
    expect(await Promise.all(sessions)).toEqual([...Array(200).keys()])
    expect(await backendsOf(db.name)).toBeLessThanOrEqual(POOL_SIZE)
  })

  test('a fencing token set by one client is never seen by the next', async () => {
    const clients = await Promise.all(
      Array.from({ length: POOL_SIZE }, async () => {
        const client = new pg.Client({ connectionString: url() })
        await client.connect()
        return client
      }),
    )
    for (const [index, client] of clients.entries()) {
      await client.query(`SET app.fencing_token = ${100 + index}`)
      await client.query(`SET application_name = 'client-${index}'`)
    }
    await Promise.all(clients.map((client) => client.end()))
    const sql = postgres(url(), { max: POOL_SIZE, connection: { application_name: 'next' } })
    try {
      const rows = await Promise.all(
        Array.from(
          { length: POOL_SIZE },
          () =>
            // After DISCARD ALL a custom setting reads '' (absent for pgfence), as in PostgreSQL.
            sql`SELECT coalesce(current_setting('app.fencing_token', true), '') AS token, current_setting('application_name') AS app`,
        ),
      )
      for (const [row] of rows) expect(row).toEqual({ token: '', app: 'next' })
    } finally {
      await sql.end()
    }
  })

  test('startup options are applied on the lent connection and undone after it', async () => {
    const client = new pg.Client({
      connectionString: url(),
      options: '-c app.fencing_token=42 -c DateStyle=German',
      application_name: 'startup-app',
    })
    await client.connect()
    const { rows } = await client.query(
      "SELECT current_setting('app.fencing_token') AS token, current_setting('application_name') AS app, current_setting('DateStyle') AS style",
    )
    await client.end()
    expect(rows[0]).toEqual({ token: '42', app: 'startup-app', style: 'German, DMY' })
    const psql = await runCommand(
      pgBin('psql'),
      [
        '-X',
        '-At',
        '-d',
        url(),
        '-c',
        "SELECT coalesce(nullif(current_setting('app.fencing_token', true), ''), 'none')",
      ],
      { env: { PGPASSWORD: POOL_PASSWORD } },
    )
    expect(psql).toMatchObject({ code: 0, stdout: 'none\n' })
  })

  test('a cancel request reaches the backend the client holds', async () => {
    const client = new pg.Client({ connectionString: url() })
    await client.connect()
    const sleeping = client.query('SELECT pg_sleep(30)')
    await expect.poll(() => backendsSleeping(db.name), { timeout: 5000 }).toBe(1)
    const { processID, secretKey } = client as unknown as { processID: number; secretKey: number }
    await sendCancelRequest(proxy.port, processID, secretKey)
    await expect(sleeping).rejects.toMatchObject({ code: '57014' })
    await client.end()
  })
})

async function backendsSleeping(database: string): Promise<number> {
  const { rows } = await adminQuery(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${database}' AND query = 'SELECT pg_sleep(30)' AND state = 'active'`,
  )
  return rows[0].n
}
