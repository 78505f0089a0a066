import pg from 'pg'
import { serialize } from 'pg-protocol'
import { describe, expect, test } from 'vitest'
import { errorCode, type BackendMessage } from '../e2e/support/wire.js'
import { splits } from '../wire/frames.js'
import { fencedPool } from './acceptance.js'
import { rawClientOf, type RawClient } from './raw-client.js'

/**
 * Transaction mode writes a client's messages to the server a chunk at a time: these drive the
 * extended protocol byte by byte through a pool of 2.
 */
const pool = fencedPool('pool_transaction_batches', 'transaction', 2)
const rawClient = () => pool.connect().then(rawClientOf)

/** One unnamed extended-protocol statement with text parameters, up to its Sync. */
const extended = (text: string, values: string[] = []) =>
  Buffer.concat([
    serialize.parse({ text }),
    serialize.bind({ values }),
    serialize.describe({ type: 'P' }),
    serialize.execute(),
    serialize.sync(),
  ])

const types = (messages: BackendMessage[]) => messages.map((message) => message.type).join('')
/** The first column of each DataRow, as text. */
const values = (messages: BackendMessage[]) =>
  messages
    .filter((message) => message.type === 'D')
    .map((message) => message.body.toString('utf8', 6, 6 + message.body.readInt32BE(2)))
const statusOf = (ready: BackendMessage) => String.fromCharCode(ready.body[0]!)

/** Runs one unnamed statement over the extended protocol; returns its first column's values. */
async function run(client: RawClient, text: string): Promise<{ values: string[]; status: string }> {
  await client.send(extended(text))
  const replies = await client.replies(1)
  expect(types(replies)).toMatch(/^12[Tn]D*CZ$/)
  return { values: values(replies), status: statusOf(replies.at(-1)!) }
}

describe('transaction pooling: extended-protocol batches', () => {
  test('two pipelined transactions arrive whole however their bytes are split', async () => {
    const client = await rawClient()
    const bytes = Buffer.concat([
      extended('SELECT $1::int + 1 AS n', ['41']),
      extended('SELECT $1::int * 2 AS n', ['21']),
    ])
    for (const pieces of splits(bytes)) {
      await client.send(...pieces.filter((piece) => piece.length > 0))
      const replies = await client.replies(2)
      expect(types(replies)).toBe('12TDCZ12TDCZ')
      expect(values(replies)).toEqual(['42', '42'])
    }
    await client.end()
  })

  test('a batch of Syncs alone is answered, and the next statement runs', async () => {
    const client = await rawClient()
    await client.send(serialize.sync())
    expect(types(await client.replies(1))).toBe('Z')
    await client.send(Buffer.concat([serialize.sync(), serialize.sync()]))
    const replies = await client.replies(2)
    expect(replies.map(statusOf)).toEqual(['I', 'I'])
    expect(await run(client, 'SELECT 5')).toEqual({ values: ['5'], status: 'I' })
    await client.end()
  })

  test('an error mid-batch skips to its Sync; the statement after the Sync runs', async () => {
    const client = await rawClient()
    await client.send(Buffer.concat([extended('SELEC 1'), extended('SELECT 7 AS n')]))
    const replies = await client.replies(2)
    expect(types(replies)).toBe('EZ12TDCZ')
    expect(errorCode(replies[0]!)).toBe('42601')
    expect(statusOf(replies[1]!)).toBe('I')
    expect(values(replies)).toEqual(['7'])
    await client.end()
  })

  test('BEGIN over the extended protocol holds one backend until COMMIT', async () => {
    const client = await rawClient()
    expect((await run(client, 'BEGIN')).status).toBe('T')
    const inside = 'SELECT pg_backend_pid() || $$ $$ || txid_current()'
    const first = await run(client, inside)
    expect(first.status).toBe('T')
    const [pid] = first.values[0]!.split(' ')
    // The other connection of the pool serves everyone else meanwhile.
    const others = await Promise.all([pool.connect(), pool.connect(), pool.connect()])
    const pids = await Promise.all(
      others.map(async (other) => (await other.query('SELECT pg_backend_pid() AS p')).rows[0].p),
    )
    expect(pids.map(String)).not.toContain(pid)
    expect(await run(client, inside)).toEqual(first)
    expect((await run(client, 'COMMIT')).status).toBe('I')
    await Promise.all([...others.map((other) => other.end()), client.end()])
  })
})

describe('transaction pooling: named statements on a shared connection', () => {
  /** One server connection: each client's transaction waits for the one before to give it back. */
  const single = fencedPool('pool_transaction_shared', 'transaction', 1)

  test('a named statement made from the same bytes by another client is used as it is', async () => {
    const text =
      "SELECT pg_backend_pid() AS pid, (SELECT prepare_time FROM pg_prepared_statements WHERE name = 'shared')::text AS made"
    const shared = { name: 'shared', text }
    const [a, b, c] = [await single.connect(), await single.connect(), await single.connect()]
    const first = (await a.query(shared)).rows[0]
    // B's Parse replaces A's statement on the one connection, which A gave back for B.
    const second = (await b.query(shared)).rows[0]
    expect(second.pid).toBe(first.pid)
    expect(second.made).not.toBe(first.made)
    // A's Bind finds B's statement, made from the same bytes: not prepared again.
    expect((await a.query(shared)).rows[0]).toEqual(second)
    // Another text under the same name replaces it; A's own text comes back for A.
    expect((await c.query({ name: 'shared', text: "SELECT 'other' AS v" })).rows).toEqual([
      { v: 'other' },
    ])
    const again = (await a.query(shared)).rows[0]
    expect(again.pid).toBe(first.pid)
    expect(again.made).not.toBe(second.made)
    await Promise.all([a, b, c].map((client: pg.Client) => client.end()))
  })
})
