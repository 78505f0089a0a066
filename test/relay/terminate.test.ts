import net from 'node:net'
import { once } from 'node:events'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { Frontend } from '../../src/wire/protocol.js'
import { waitFor } from '../e2e/support/wait.js'
import { createTestDatabase, queryOnce, type TestDatabase } from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'

/**
 * A client's Terminate ends its session in the native relay at once (src/native/relay.c,
 * relay_read): the proxy does not wait for the client to close its end, so that a login costs
 * no turn of the loop after its goodbye.
 */

let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('relay_terminate')
})

afterAll(async () => {
  await db?.drop()
})

const terminate = Buffer.from([Frontend.Terminate, 0, 0, 0, 4])

/** A logged-in client on a socket of its own, and its backend's pid (a pool's password). */
async function connect(proxy: TestProxy) {
  const socket = new net.Socket()
  const client = new pg.Client({
    connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    stream: () => socket,
  })
  client.on('error', () => {})
  await client.connect()
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
  return { client, socket, pid }
}

/** Sends Terminate and keeps the socket open: resolves when the proxy has closed its end. */
async function sayGoodbyeAndWait(socket: net.Socket): Promise<void> {
  const ended = once(socket, 'end')
  socket.write(terminate)
  await ended
}

const backendAlive = async (pid: number) =>
  (await queryOnce(db.url, `SELECT 1 FROM pg_stat_activity WHERE pid = ${pid}`)).rowCount === 1

describe.each(['session', 'transaction'] as const)('%s pool', (mode) => {
  let proxy: TestProxy

  beforeAll(async () => {
    const config: ConfigOverrides = {
      pool: { mode, size: 1 },
      auth: { file: writeUserlist() },
      relay: 'native',
    }
    proxy = await startTestProxy(config, db.url)
  })

  afterAll(async () => {
    await proxy?.close()
  })

  test('the proxy closes a client that said Terminate, and its connection serves the next', async () => {
    for (let round = 0; round < 3; round++) {
      const { socket, pid } = await connect(proxy)
      await sayGoodbyeAndWait(socket)
      socket.destroy()
      const next = await connect(proxy)
      expect(next.pid).toBe(pid)
      await next.client.end()
    }
  })
})

test('with no pool, the Terminate goes on to the server, whose backend exits', async () => {
  const proxy = await startTestProxy({ relay: 'native' }, db.url)
  try {
    const { socket, pid } = await connect(proxy)
    await sayGoodbyeAndWait(socket)
    socket.destroy()
    await waitFor(async () => !(await backendAlive(pid)), { what: 'the backend to exit' })
  } finally {
    await proxy.close()
  }
})
