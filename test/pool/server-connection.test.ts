import net from 'node:net'
import { once } from 'node:events'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { defaultConfig } from '../../src/config/load.js'
import { ServerConnection } from '../../src/pool/server-connection.js'
import { UpstreamNode } from '../../src/upstream/upstream-node.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'

const message = (type: string, body: number[]): Buffer => {
  const head = Buffer.alloc(5)
  head.write(type, 0, 'latin1')
  head.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([head, Buffer.from(body)])
}
/** AuthenticationOk, BackendKeyData, ReadyForQuery: a trusting server's whole login answer. */
const LOGIN_ANSWER = Buffer.concat([
  message('R', [0, 0, 0, 0]),
  message('K', [0, 0, 0, 42, 0, 0, 0, 7]),
  message('Z', [0x49]),
])

const cleanups: (() => void)[] = []
afterEach(() => cleanups.splice(0).forEach((cleanup) => cleanup()))

/** A server connection to a stand-in that logs in anyone and never answers a statement. */
async function silentServer(): Promise<ServerConnection> {
  const sockets: net.Socket[] = []
  const listener = net.createServer((socket) => {
    sockets.push(socket)
    socket.once('data', () => socket.write(LOGIN_ANSWER))
  })
  listener.listen(0, '127.0.0.1')
  await once(listener, 'listening')
  const { port } = listener.address() as net.AddressInfo
  const config = defaultConfig()
  const node = new UpstreamNode(
    { ...config.upstream, host: '127.0.0.1', port, tls: 'disable' },
    true,
  )
  const connection = await ServerConnection.open(node, config.tcpKeepalive, 'app', 'appdb', {
    password: 'unused',
  })
  cleanups.push(() => {
    connection.destroy()
    for (const socket of sockets) socket.destroy()
    listener.close()
  })
  return connection
}

/** A connection's reset, as a promise of whether it may be reused. */
const reset = (connection: ServerConnection, unclean: boolean, then: string | null = null) =>
  new Promise<boolean>((resolve) => connection.reset(unclean, 5000, then, resolve))

describe('server connection', () => {
  test("pgfence's own statement unanswered in time rejects, and the connection is not reused", async () => {
    const connection = await silentServer()
    const started = Date.now()
    await expect(connection.within(200, (c) => c.run('SELECT 1'))).rejects.toThrow(
      'the server did not answer within 200 ms',
    )
    expect(Date.now() - started).toBeGreaterThanOrEqual(190)
    expect(await reset(connection, false)).toBe(false)
  })
})

describe('reset, on PostgreSQL', () => {
  let db: TestDatabase
  beforeAll(async () => void (db = await createTestDatabase('server_connection_reset')))
  afterAll(async () => db?.drop())

  const CARRY = "SELECT pg_catalog.set_config('application_name', 'carried', false)"

  async function open(): Promise<ServerConnection> {
    const url = new URL(db.url)
    const config = defaultConfig()
    const node = new UpstreamNode(
      { ...config.upstream, host: db.host, port: db.port, tls: 'disable' },
      true,
    )
    const user = decodeURIComponent(url.username) || 'postgres'
    const connection = await ServerConnection.open(node, config.tcpKeepalive, user, db.name, {
      password: decodeURIComponent(url.password),
    })
    cleanups.push(() => connection.destroy())
    return connection
  }

  /** How many writes `connection` makes to the server while `work` runs. */
  async function writesDuring<T>(connection: ServerConnection, work: () => Promise<T>) {
    const write = connection.socket.write.bind(connection.socket)
    let writes = 0
    connection.socket.write = ((...args: Parameters<typeof write>) => {
      writes++
      return write(...args)
    }) as typeof connection.socket.write
    try {
      return { result: await work(), writes }
    } finally {
      connection.socket.write = write
    }
  }

  test('the statement that follows the DISCARD goes out in the same write', async () => {
    const connection = await open()
    await connection.run("SET application_name = 'left behind'")
    const { result, writes } = await writesDuring(connection, () => reset(connection, false, CARRY))
    expect(result).toBe(true)
    expect(writes).toBe(1)
    expect(await connection.rows('SHOW application_name')).toEqual([['carried']])
  })

  test.each([
    ['open', ['BEGIN', "SET application_name = 'inside'"]],
    ['aborted', ['BEGIN', 'SELECT 1/0']],
  ])('a transaction left %s is rolled back, and the statement runs after all', async (_, left) => {
    const connection = await open()
    await connection.run('CREATE TEMP TABLE left_behind (id int)')
    for (const text of left) await connection.run(text).catch(() => {})
    const { result, writes } = await writesDuring(connection, () => reset(connection, true, CARRY))
    expect(result).toBe(true)
    expect(writes).toBe(2)
    expect(await connection.rows('SHOW application_name')).toEqual([['carried']])
    expect(await connection.rows("SELECT to_regclass('pg_temp.left_behind') IS NULL")).toEqual([
      ['t'],
    ])
  })

  test('a statement that fails after the DISCARD: the connection is not reused', async () => {
    const connection = await open()
    expect(await reset(connection, false, 'SELECT 1/0')).toBe(false)
  })
})
