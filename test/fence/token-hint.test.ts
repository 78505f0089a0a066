import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { startTestProxy } from '../support/proxy.js'
import { fencingConfig, installFencing, invoicesSql, seedInvoice99 } from './support.js'

// PF428's HINT must name what works where the error is raised: on a direct connection only the
// session setting reaches the fence trigger; through pgfence a comment token does too.

const fencing = { setting: 'billing.lock_token', tables: [{ name: 'invoices' }] }
const update = "UPDATE invoices SET status = 'PAID' WHERE id = 99"
let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('token_hint')
  const admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  try {
    await admin.query(invoicesSql)
    await installFencing(db.url, fencingConfig(fencing))
    await admin.query(seedInvoice99)
  } finally {
    await admin.end()
  }
})

afterAll(async () => {
  await db?.drop()
})

/** The PF428 a connection to `url` gets for the update with no token. */
async function missingToken(client: pg.Client): Promise<pg.DatabaseError> {
  const err = (await client.query(update).catch((e) => e)) as pg.DatabaseError
  expect(err).toMatchObject({ code: 'PF428', table: 'invoices' })
  return err
}

test('on a direct connection the hint names the configured setting, SET and set_config', async () => {
  const client = new pg.Client({ connectionString: db.url })
  await client.connect()
  try {
    const { hint } = await missingToken(client)
    expect(hint).toBe(
      "SET billing.lock_token = N, or SELECT set_config('billing.lock_token', 'N', false), " +
        'with N the token of the lock you hold',
    )
    await client.query("SELECT set_config('billing.lock_token', '101', false)")
    expect((await client.query(update)).rowCount).toBe(1)
  } finally {
    await client.end()
  }
})

test('through pgfence the hint also names the comment token, which works there', async () => {
  const proxy = await startTestProxy({ fencing }, db.url)
  const client = new pg.Client({ connectionString: proxy.url() })
  await client.connect()
  try {
    const { hint } = await missingToken(client)
    expect(hint).toBe(
      'SET billing.lock_token = N, or put /* fencing_token=N */ in the statement, ' +
        'with N the token of the lock you hold',
    )
    expect((await client.query(`/* fencing_token=102 */ ${update}`)).rowCount).toBe(1)
  } finally {
    await client.end()
    await proxy.close()
  }
})
