import pg from 'pg'
import { afterAll, beforeAll, beforeEach, expect, test } from 'vitest'
import { capturingLogger, startFencedStack, type FencedStack } from '../fencing-e2e/support.js'
import { POOL_PASSWORD, writeUserlist } from '../pool/support.js'
import { startTestProxy } from '../support/proxy.js'
import { createTestDatabase } from '../support/database.js'

// "pgfence logs each statement it relays under it": every statement from the one that turns
// pgfence.maintenance on until the session has certainly turned it off, on either relay.
let stack: FencedStack
const clients: pg.Client[] = []

async function connect(options: pg.ClientConfig = {}): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: stack.url, ...options })
  await client.connect()
  clients.push(client)
  return client
}

beforeAll(async () => {
  stack = await startFencedStack(await createTestDatabase('maintenance_log'))
  await stack.seed(99)
})

afterAll(async () => {
  await Promise.all(clients.map((client) => client.end()))
  await stack?.close()
})

beforeEach(() => void (stack.logRecords.length = 0))

/**
 * The statements logged under maintenance so far, a named statement's execution as `#name`.
 * The proxy logs a statement before it relays it: once its answer is in, so is its log line.
 */
const logged = () =>
  stack.logRecords
    .filter((r) => r.msg === 'pgfence.maintenance statement')
    .map((r) => (r.statement as string | undefined) ?? `#${String(r.prepared)}`)

test('session SET: every statement until RESET, simple, extended and named, cached or not', async () => {
  const client = await connect()
  const update = "UPDATE invoices SET status = 'REPAIRED' WHERE id = 99"
  // The update's template is cached before: the native relay would rewrite it on its own.
  await client.query('SET app.fencing_token = 100')
  await client.query(update)
  await client.query('SET pgfence.maintenance = on')
  await client.query(update)
  await client.query(update)
  await client.query('SELECT 1 AS plain')
  await client.query('SELECT $1::int AS extended', [2])
  const named = { name: 'repair', text: 'UPDATE invoices SET amount = $1 WHERE id = 99' }
  await client.query({ ...named, values: [1] })
  await client.query({ ...named, values: [2] })
  await client.query('RESET pgfence.maintenance')
  await client.query('SELECT 3 AS after')
  await client.query({ ...named, values: [3] })
  expect(logged()).toEqual([
    'SET pgfence.maintenance = on',
    update,
    update,
    'SELECT 1 AS plain',
    'SELECT $1::int AS extended',
    named.text,
    '#repair',
    '#repair',
    'RESET pgfence.maintenance',
  ])
  expect(await stack.invoice(99)).toEqual({ status: 'REPAIRED', fencing_token: '100' })
})

/** Statements sent one by one; those marked `+` must be logged, the others not. */
const switches = [
  {
    name: 'SET LOCAL: the statements of its transaction, up to its end',
    statements: [
      'BEGIN',
      'SELECT 1 AS before',
      '+SET LOCAL pgfence.maintenance = on',
      '+SELECT 2 AS during',
      '+COMMIT',
      'SELECT 3 AS after',
    ],
  },
  {
    name: 'set_config and DISCARD ALL',
    statements: [
      "+SELECT set_config('pgfence.maintenance', 'on', false)",
      '+SELECT 1 AS during',
      '+DISCARD ALL',
      'SELECT 2 AS after',
    ],
  },
  {
    name: 'a switch inside a transaction block stays on after it (it may have been rolled back)',
    statements: [
      '+SET pgfence.maintenance = on',
      '+BEGIN',
      '+SET pgfence.maintenance = off',
      '+ROLLBACK',
      '+SELECT 1 AS still',
      "+SET pgfence.maintenance TO 'off'",
      'SELECT 2 AS after',
    ],
  },
  {
    name: 'turned on by the startup options',
    options: '-c pgfence.maintenance=on',
    statements: ['+SELECT 1 AS during', '+RESET ALL', 'SELECT 2 AS after'],
  },
]

test.each(switches)('$name', async ({ options, statements }) => {
  const client = await connect(options ? { options } : {})
  for (const statement of statements) await client.query(statement.replace(/^\+/, ''))
  const expected = statements.filter((s) => s.startsWith('+')).map((s) => s.slice(1))
  expect(logged()).toEqual(expected)
})

test('transaction pooling: SET LOCAL up to the end of its transaction', async () => {
  const records: Record<string, unknown>[] = []
  const proxy = await startTestProxy(
    {
      pool: { mode: 'transaction', size: 2 },
      auth: { file: writeUserlist() },
      fencing: { tables: [{ name: 'invoices' }] },
    },
    stack.db.url,
    { logger: capturingLogger(records) },
  )
  const client = new pg.Client({
    connectionString: proxy.url('postgres', stack.db.name, POOL_PASSWORD),
  })
  try {
    await client.connect()
    await client.query('BEGIN')
    await client.query('SET LOCAL pgfence.maintenance = on')
    await client.query("UPDATE invoices SET status = 'POOLED' WHERE id = 99")
    await client.query('COMMIT')
    await client.query('SELECT 1 AS after')
  } finally {
    await client.end()
    await proxy.close()
  }
  expect(
    records.filter((r) => r.msg === 'pgfence.maintenance statement').map((r) => r.statement),
  ).toEqual([
    'SET LOCAL pgfence.maintenance = on',
    "UPDATE invoices SET status = 'POOLED' WHERE id = 99",
    'COMMIT',
  ])
  expect(await stack.invoice(99)).toEqual({ status: 'POOLED', fencing_token: '100' })
})
