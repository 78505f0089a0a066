import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { fencingConfig, installFencing, invoicesSql } from '../fence/support.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { clientsKeepTheirTokens, tokenOf, tokenRules } from './acceptance.js'
import { backendsOf, POOL_PASSWORD, writeUserlist } from './support.js'

/** As large as the crowd of connected clients: each holds a server connection in session mode. */
const POOL_SIZE = 30
let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('pool_session_acceptance')
  const setup = new pg.Client({ connectionString: db.url })
  await setup.connect()
  await setup.query(invoicesSql)
  await setup.end()
  const fencing = { tables: [{ name: 'invoices', column: 'fencing_token', requireToken: true }] }
  await installFencing(db.url, fencingConfig(fencing))
  proxy = await startTestProxy(
    { pool: { mode: 'session', size: POOL_SIZE }, auth: { file: writeUserlist() }, fencing },
    db.url,
  )
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

async function connect(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
  await client.connect()
  return client
}

const target = {
  connect,
  get database() {
    return db.name
  },
}

describe('session pooling, the acceptance checks of transaction mode', () => {
  test('30 clients keep their own session tokens over a pool of 30', () =>
    clientsKeepTheirTokens(target, POOL_SIZE, 1000))

  test("PostgreSQL's rules: rollback, SET LOCAL, RESET, set_config", () => tokenRules(target))

  test('200 short sessions queue for the pool; none inherits a token', async () => {
    const answers = await Promise.all(
      [...Array(200).keys()].map(async (i) => {
        const client = await connect()
        try {
          const inherited = await tokenOf(client)
          await client.query(`SET app.fencing_token = ${i + 1}`)
          const { rows } = await client.query('SELECT $1::int AS n', [i])
          return { n: rows[0].n, inherited }
        } finally {
          await client.end()
        }
      }),
    )
    expect(answers).toEqual([...Array(200).keys()].map((n) => ({ n, inherited: '' })))
    expect(await backendsOf(db.name)).toBeLessThanOrEqual(POOL_SIZE)
  })
})
