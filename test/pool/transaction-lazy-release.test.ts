import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { relayUnderTest, startTestProxy, type TestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { waitFor } from '../e2e/support/wait.js'
import { POOL_PASSWORD, writeUserlist } from './support.js'

// One server connection: whatever a client leaves on it is what the next client would see.
let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('pool_lazy_release')
  const setup = new pg.Client({ connectionString: db.url })
  await setup.connect()
  await setup.query('CREATE TABLE notes (id int)')
  await setup.end()
  proxy = await startTestProxy(
    {
      pool: { mode: 'transaction', size: 1, waitTimeoutMs: 3000 },
      auth: { file: writeUserlist() },
      limits: { queryTimeoutMs: 1500, idleTransactionTimeoutMs: 1500 },
    },
    db.url,
  )
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

async function connect(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
  client.on('error', () => {})
  await client.connect()
  return client
}

const settingOf = async (client: pg.Client, name: string): Promise<string> =>
  (await client.query(`SELECT coalesce(current_setting('${name}', true), '') AS v`)).rows[0].v

const pidOf = async (client: pg.Client): Promise<number> =>
  (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid

test('an idle client keeps the server until another waits; settings and named statements stay its own', async () => {
  const first = await connect()
  await first.query('SET app.fencing_token = 7')
  const mine = { name: 'q', text: 'SELECT $1::int + 1 AS v', values: [1] }
  expect((await first.query(mine)).rows).toEqual([{ v: 2 }])
  if (relayUnderTest() !== 'node') await waitFor(() => proxy.nativeSessionCount() === 1)
  // The only server connection is kept by the idle first client: the second gets it at once.
  const second = await connect()
  expect(await settingOf(second, 'app.fencing_token')).toBe('')
  await second.query('SET app.fencing_token = 9')
  const theirs = { name: 'q', text: 'SELECT $1::int * 10 AS v', values: [3] }
  for (let round = 0; round < 3; round++) {
    expect((await first.query(mine)).rows).toEqual([{ v: 2 }])
    expect((await second.query(theirs)).rows).toEqual([{ v: 30 }])
    expect(await settingOf(first, 'app.fencing_token')).toBe('7')
    expect(await settingOf(second, 'app.fencing_token')).toBe('9')
  }
  await first.end()
  await second.end()
})

test('a refused feature stays refused while the client keeps its server', async () => {
  const client = await connect()
  await client.query('SELECT 1')
  expect(await sqlstateOf(client.query('LISTEN jobs'))).toBe('0A000')
  expect(await sqlstateOf(client.query('SELECT pg_advisory_lock(1)'))).toBe('0A000')
  expect((await client.query('SELECT 2 AS v')).rows).toEqual([{ v: 2 }])
  await client.end()
})

test('query timeout in a transaction: 57014, the backend is not lent again', async () => {
  const client = await connect()
  await client.query('BEGIN')
  const pid = await pidOf(client)
  expect(await sqlstateOf(client.query('SELECT pg_sleep(30)'))).toBe('57014')
  const next = await connect()
  expect(await pidOf(next)).not.toBe(pid)
  await next.end()
})

test('query timeout outside a transaction: 08007, outcome unknown', async () => {
  const client = await connect()
  expect(await sqlstateOf(client.query('SELECT pg_sleep(30)'))).toBe('08007')
  const next = await connect()
  expect((await next.query('SELECT 1 AS v')).rows).toEqual([{ v: 1 }])
  await next.end()
})

test('idle in transaction: 25P03, the transaction rolled back before the server is reused', async () => {
  const client = await connect()
  await client.query('BEGIN')
  await client.query('INSERT INTO notes VALUES (1)')
  await client.query('SET LOCAL app.fencing_token = 5')
  const failure = new Promise<string>((resolve) =>
    client.once('error', (err: Error & { code?: string }) => resolve(err.code ?? '')),
  )
  expect(await failure).toBe('25P03')
  const next = await connect()
  expect((await next.query('SELECT count(*)::int AS n FROM notes')).rows).toEqual([{ n: 0 }])
  expect(await settingOf(next, 'app.fencing_token')).toBe('')
  await next.end()
})
