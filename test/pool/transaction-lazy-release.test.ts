import pg, { type DatabaseError } from 'pg'
import { serialize } from 'pg-protocol'
import { expect, test } from 'vitest'
import { relayUnderTest } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { waitFor } from '../e2e/support/wait.js'
import { rawClientOf } from './raw-client.js'
import { notesPool } from './support.js'

// Two server connections. With the native relay a client keeps one between its transactions
// while the other is free, until another client waits: a blocker holding the other connection in
// a transaction makes the next client wait for the kept one.
const pool = notesPool('pool_lazy_release', 2)
const connect = () => pool.connect()

const settingOf = async (client: pg.Client, name: string): Promise<string> =>
  (await client.query(`SELECT coalesce(current_setting('${name}', true), '') AS v`)).rows[0].v

/**
 * With the native relay, an idle client that keeps the connection is relayed natively. A client
 * keeps it at the end of a transaction that found one to spare: while the previous test's
 * connections are still being reset there is none, so `again` runs another transaction.
 */
async function keptNatively(again: () => Promise<unknown>): Promise<void> {
  if (relayUnderTest() === 'node') return
  const kept = () => pool.proxy.nativeSessionCount() === 1
  await waitFor(async () => kept() || (await again(), kept()))
}

/** A client in a transaction: it holds a connection until it ends. */
async function blocker(): Promise<pg.Client> {
  const client = await connect()
  await client.query('BEGIN')
  return client
}

test('an idle client keeps the server until another waits; settings and named statements stay its own', async () => {
  const first = await connect()
  await first.query('SET app.fencing_token = 7')
  const mine = { name: 'q', text: 'SELECT $1::int + 1 AS v', values: [1] }
  expect((await first.query(mine)).rows).toEqual([{ v: 2 }])
  await keptNatively(() => first.query('SELECT 1'))
  const blocking = await blocker()
  // The first client gives its connection back for the second, and waits for it itself.
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
  await Promise.all([first, second, blocking].map((client) => client.end()))
})

test('other clients’ named statements left on the connections go, and the native relay carries the next client', async () => {
  // Both connections end up holding the statement: each of two clients prepares it in a
  // transaction while the other holds the other connection.
  const left = { name: 'left', text: 'SELECT $1::int AS v', values: [4] }
  const owners = [await connect(), await connect()]
  await Promise.all(owners.map((owner) => owner.query('BEGIN')))
  for (const owner of owners) expect((await owner.query(left)).rows).toEqual([{ v: 4 }])
  await Promise.all(owners.map((owner) => owner.query('COMMIT')))
  await Promise.all(owners.map((owner) => owner.end()))
  const plain = await connect()
  await keptNatively(() => plain.query('SELECT 1'))
  const held = 'SELECT count(*)::int AS n FROM pg_prepared_statements'
  if (relayUnderTest() !== 'node') expect((await plain.query(held)).rows).toEqual([{ n: 0 }])
  // A client of the statement's name finds it made again where it runs.
  const back = await connect()
  expect((await back.query({ ...left, values: [5] })).rows).toEqual([{ v: 5 }])
  await Promise.all([plain.end(), back.end()])
})

test('a named statement and a setting made while relayed natively follow the client', async () => {
  const first = await connect()
  await first.query('SELECT 1')
  await keptNatively(() => first.query('SELECT 1'))
  await first.query({ name: 'later', text: 'SELECT $1::text AS v', values: ['a'] })
  await first.query("SELECT set_config('app.fencing_token', '11', false)")
  const blocking = await blocker()
  const second = await connect()
  expect(await settingOf(second, 'app.fencing_token')).toBe('')
  await second.end()
  await blocking.end()
  expect(
    (await first.query({ name: 'later', text: 'SELECT $1::text AS v', values: ['b'] })).rows,
  ).toEqual([{ v: 'b' }])
  expect(await settingOf(first, 'app.fencing_token')).toBe('11')
  await first.end()
})

test('a client in a transaction keeps the server until it ends; the waiting client runs after', async () => {
  const first = await connect()
  await first.query('BEGIN')
  await first.query('INSERT INTO notes VALUES (1)')
  const blocking = await blocker()
  const second = connect().then(async (client) => {
    const rows = (await client.query('SELECT count(*)::int AS n FROM notes')).rows
    await client.end()
    return rows
  })
  await first.query('COMMIT')
  // Run before the COMMIT, it would count none.
  expect(await second).toEqual([{ n: 1 }])
  await Promise.all([first, blocking].map((client) => client.end()))
})

test('a refused feature stays refused while the client keeps its server', async () => {
  const client = await connect()
  await client.query('SELECT 1')
  await keptNatively(() => client.query('SELECT 1'))
  expect(await sqlstateOf(client.query('LISTEN jobs'))).toBe('0A000')
  const err = (await client.query('SELECT pg_advisory_lock(1)').catch((e) => e)) as DatabaseError
  expect(err).toMatchObject({ code: '0A000', hint: expect.stringContaining('xact_lock') })
  expect(err.where).toBeUndefined()
  expect((await client.query('SELECT 2 AS v')).rows).toEqual([{ v: 2 }])
  await client.end()
})

test('a kept connection is not given back between a Parse and its Sync', async () => {
  const first = rawClientOf(await connect())
  const selectOne = async () => {
    await first.send(serialize.query('SELECT 1'))
    await first.replies(1)
  }
  await selectOne()
  await keptNatively(selectOne)
  // Parse and Describe with a Flush and no Sync: the implicit transaction stays open.
  await first.send(
    serialize.parse({ text: 'SELECT $1::int * 2 AS n', types: [23] }),
    serialize.describe({ type: 'S' }),
    serialize.flush(),
  )
  expect((await first.messages(3)).map((message) => message.type).join('')).toBe('1tT')
  const blocking = await blocker()
  // This client waits: the first gives its connection back only after its Sync.
  const waiting = connect()
  await first.send(serialize.bind({ values: ['21'] }), serialize.execute(), serialize.sync())
  const replies = await first.replies(1)
  expect(replies.map((message) => message.type).join('')).toBe('2DCZ')
  expect(replies[1]!.body.toString('utf8', 6)).toBe('42')
  const second = await waiting
  expect((await second.query('SELECT 3 AS v')).rows).toEqual([{ v: 3 }])
  await Promise.all([first, second, blocking].map((client) => client.end()))
})

test('a session SET made while kept lasts its transaction, as on a connection given back', async () => {
  const client = await connect()
  const before = (await client.query('SHOW statement_timeout')).rows[0].statement_timeout
  await keptNatively(() => client.query('SELECT 1'))
  await client.query("SET statement_timeout = '123s'")
  expect((await client.query('SHOW statement_timeout')).rows[0].statement_timeout).toBe(before)
  await client.query('SET app.fencing_token = 12')
  expect(await settingOf(client, 'app.fencing_token')).toBe('12')
  await client.end()
})
