import { once } from 'node:events'
import pg from 'pg'
import { serialize } from 'pg-protocol'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { connectRaw, startupMessage } from './support/wire.js'
import { waitFor } from './support/wait.js'
import { generator, mutate } from './support/mutate.js'

let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('e2e_fuzz')
  // A fenced table, so mutated Query and Parse texts go through the rewriter as well.
  proxy = await startTestProxy({ fencing: { tables: [{ name: 'invoices' }] } }, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

/** A valid session: login, a simple query, a fenced write, and an extended-protocol round. */
function validTraffic(database: string): Buffer {
  return Buffer.concat([
    startupMessage('postgres', database),
    serialize.query('SELECT 1; /*fencing_token=5*/ UPDATE invoices SET a = 1 WHERE id = 2'),
    serialize.parse({ name: 's1', text: 'DELETE FROM invoices WHERE id = $1', types: [23] }),
    serialize.bind({ statement: 's1', values: ['7'] }),
    serialize.describe({ type: 'P' }),
    serialize.execute({}),
    serialize.sync(),
    serialize.copyData(Buffer.from('1\t2\n')),
    serialize.end(),
  ])
}

/** Sends the bytes in random pieces, ends the stream, and waits until the proxy closes it. */
async function play(bytes: Buffer, random: () => number): Promise<void> {
  const socket = await connectRaw(proxy.port)
  socket.resume()
  const closed = once(socket, 'close')
  for (let at = 0; at < bytes.length;) {
    const size = 1 + Math.floor(random() * 64)
    socket.write(bytes.subarray(at, at + size))
    at += size
  }
  socket.end()
  await closed
}

test('300 mutated sessions each end with a closed connection, and the proxy keeps serving', async () => {
  const traffic = validTraffic(db.name)
  for (let batch = 0; batch < 30; batch++) {
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => {
        const random = generator(batch * 10 + i + 1)
        return play(mutate(traffic, random), random)
      }),
    )
  }
  const client = new pg.Client({ connectionString: proxy.url(), connectionTimeoutMillis: 5000 })
  await client.connect()
  const { rows } = await client.query('SELECT 1 AS one')
  await client.end()
  expect(rows).toEqual([{ one: 1 }])
  // Every upstream connection of a fuzzed session is gone with it.
  await waitFor(
    async () => {
      const { rows: left } = await adminQuery(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${db.name}' AND application_name = 'pgfence-e2e-raw'`,
      )
      return left[0].n === 0
    },
    { what: 'the fuzzed sessions to leave PostgreSQL' },
  )
})
