// A session-mode server connection that C keeps watching between clients (a server link,
// src/native/server-link.h): after a clean goodbye the reset goes out from C and the next
// client's relay takes the connection over as it is; anything else goes back to JavaScript.
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { POOL_PASSWORD, writeUserlist } from './support.js'
import { descriptorsOf as descriptorsOfEnds } from '../support/descriptors.js'

let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('kept_server')
  proxy = await startTestProxy({
    pool: { mode: 'session', size: 1 },
    auth: { file: writeUserlist() },
    relay: 'native',
  })
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

/** A client's socket, to close it without the Terminate that end() sends (the client errs). */
function socketOf(client: pg.Client): { destroy(): void; end(bytes: Buffer): void } {
  client.on('error', () => undefined)
  return (
    client as unknown as { connection: { stream: { destroy(): void; end(b: Buffer): void } } }
  ).connection.stream
}

/**
 * pgfence's descriptors for its server connection from `port`: 1 while Node's socket reads it,
 * 2 while C watches it too, 0 once closed.
 */
const descriptorsOf = (port: number) => descriptorsOfEnds({ local: port })

/** The pool's one backend: its pid, and the port of pgfence's end of the connection. */
async function backend(): Promise<{ pid: number; port: number }> {
  const { rows } = await adminQuery(
    `SELECT pid, client_port AS port FROM pg_stat_activity
      WHERE datname = '${db.name}' AND backend_type = 'client backend'`,
  )
  expect(rows).toHaveLength(1)
  return rows[0]
}

describe('a server connection kept in C between clients', () => {
  test('after a clean goodbye C watches it, and the next client finds nothing of the last', async () => {
    const first = await connect()
    await first.query(`SET pgfence_test.kept = 'first'`)
    await first.query(`PREPARE kept_plan AS SELECT 1`)
    await first.query(`CREATE TEMP TABLE kept_notes (id int)`)
    const { pid, port } = await backend()
    await first.end()
    await expect.poll(() => descriptorsOf(port)).toBe(2)

    const next = await connect()
    const { rows } = await next.query(
      `SELECT pg_backend_pid() AS pid,
              current_setting('pgfence_test.kept', true) AS kept,
              (SELECT count(*)::int FROM pg_prepared_statements) AS prepared,
              to_regclass('pg_temp.kept_notes') IS NULL AS dropped`,
    )
    expect(rows[0]).toEqual({ pid, kept: '', prepared: 0, dropped: true })
    expect(descriptorsOf(port)).toBe(2) // the relay reads C's descriptor
    await next.end()
    await expect.poll(() => descriptorsOf(port)).toBe(2)
  })

  test('a client that closes its socket without Terminate, idle, leaves it to C as a goodbye does', async () => {
    const client = await connect()
    await client.query(`SET pgfence_test.kept = 'dropped'`)
    const { pid, port } = await backend()
    socketOf(client).destroy()
    await expect.poll(() => proxy.connectionCount()).toBe(0)
    // The relay's own duplicate is closed by now: a second descriptor is C's, watching.
    await expect.poll(() => descriptorsOf(port)).toBe(2)
    const next = await connect()
    const { rows } = await next.query(
      `SELECT pg_backend_pid() AS pid, current_setting('pgfence_test.kept', true) AS kept`,
    )
    expect(rows[0]).toEqual({ pid, kept: '' })
    await next.end()
  })

  test('one that closes it between a Parse and its Sync gives the connection back to JavaScript', async () => {
    const client = await connect()
    const { pid, port } = await backend()
    const text = Buffer.from('SELECT 1\0\0')
    const parse = Buffer.alloc(5)
    parse.write('P')
    parse.writeUInt32BE(4 + text.length + 2, 1)
    socketOf(client).end(Buffer.concat([parse, text, Buffer.alloc(2)]))
    // JavaScript's reset (a Sync first) runs on the connection's own socket.
    await expect.poll(() => descriptorsOf(port)).toBe(1)
    const next = await connect()
    const { rows } = await next.query('SELECT pg_backend_pid() AS pid')
    expect(rows[0]).toEqual({ pid })
    await next.end()
    await expect.poll(() => descriptorsOf(port)).toBe(2)
  })

  test('a client that leaves inside a transaction gives the connection back to JavaScript', async () => {
    const client = await connect()
    await client.query('BEGIN')
    await client.query(`SET LOCAL pgfence_test.kept = 'open'`)
    const { pid, port } = await backend()
    await client.end()
    // JavaScript's reset rolls the transaction back, on the connection's own socket.
    await expect.poll(() => descriptorsOf(port)).toBe(1)
    const next = await connect()
    const { rows } = await next.query(
      `SELECT pg_backend_pid() AS pid, now() = statement_timestamp() AS outside`,
    )
    expect(rows[0]).toEqual({ pid, outside: true })
    await next.end()
    await expect.poll(() => descriptorsOf(port)).toBe(2)
  })

  test('a connection whose backend ends while it waits is closed, and the next client gets another', async () => {
    const first = await connect()
    const { pid, port } = await backend()
    await first.end()
    await expect.poll(() => descriptorsOf(port)).toBe(2)
    await adminQuery(`SELECT pg_terminate_backend(${pid}, 5000)`)
    // C reads the server's goodbye and the pool lets the connection go.
    await expect.poll(() => descriptorsOf(port)).toBe(0)
    const next = await connect()
    const { rows } = await next.query('SELECT pg_backend_pid() AS pid')
    expect(rows[0].pid).not.toBe(pid)
    await next.end()
  })
})
