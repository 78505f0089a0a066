import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { backendsOf, POOL_PASSWORD, writeUserlist } from './support.js'

let db: TestDatabase
const proxies: TestProxy[] = []

beforeAll(async () => {
  db = await createTestDatabase('pool_lifecycle')
})

afterEach(async () => {
  await Promise.all(proxies.splice(0).map((proxy) => proxy.close()))
})

afterAll(async () => {
  await db?.drop()
})

async function pooledProxy(
  pool: Record<string, number | string>,
  limits: Record<string, number> = {},
): Promise<TestProxy> {
  const proxy = await startTestProxy(
    { pool: { mode: 'session', ...pool }, auth: { file: writeUserlist() }, limits },
    db.url,
  )
  proxies.push(proxy)
  return proxy
}

async function connect(proxy: TestProxy): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
  await client.connect()
  return client
}

const backendPid = async (client: pg.Client): Promise<number> =>
  (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid

describe('pool lifecycle', () => {
  test('a client waiting longer than waitTimeoutMs is told so', async () => {
    const proxy = await pooledProxy({ size: 1, waitTimeoutMs: 200 })
    const holder = await connect(proxy)
    // Greeted from the pool's server defaults, it waits for a connection once connected.
    const waiter = await connect(proxy)
    waiter.on('error', () => {})
    await expect(waiter.query('SELECT 1')).rejects.toMatchObject({
      code: '08P01',
      message: expect.stringContaining('timeout waiting for a server connection'),
    })
    await holder.end()
    const next = await connect(proxy)
    await next.end()
  })

  test.each(['session', 'transaction'])(
    '%s mode: a client that has logged in waits up to waitTimeoutMs, past the startup timeout',
    async (mode) => {
      const proxy = await pooledProxy(
        { mode, size: 1, waitTimeoutMs: 1000 },
        { startupTimeoutMs: 200 },
      )
      const holder = await connect(proxy)
      await holder.query('BEGIN') // a transaction keeps the connection in transaction mode too
      const started = Date.now()
      const waiter = await connect(proxy)
      waiter.on('error', () => {})
      await expect(waiter.query('SELECT 1')).rejects.toMatchObject({
        code: '08P01',
        message: expect.stringContaining('timeout waiting for a server connection'),
      })
      expect(Date.now() - started).toBeGreaterThanOrEqual(1000)
      await holder.end()
    },
  )

  test.each(['session', 'transaction'])(
    '%s mode: a client beyond the pool is greeted as the server would, then waits with its first statement',
    async (mode) => {
      const proxy = await pooledProxy({ mode, size: 1 })
      const holder = await connect(proxy)
      await holder.query('BEGIN')
      const holderPid = await backendPid(holder)
      const waiter = new pg.Client({
        connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
        application_name: 'beyond-the-pool',
      })
      const greeted = new Map<string, string>()
      const wire = (waiter as unknown as { connection: NodeJS.EventEmitter }).connection
      wire.on('parameterStatus', (message: { parameterName: string; parameterValue: string }) =>
        greeted.set(message.parameterName, message.parameterValue),
      )
      // Connected while the only server connection is held: its greeting came from the pool.
      await waiter.connect()
      expect(greeted.get('application_name')).toBe('beyond-the-pool')
      expect(greeted.get('server_version')).toMatch(/^\d+/)
      expect(greeted.get('standard_conforming_strings')).toBe('on')
      const asked = waiter.query(
        "SELECT pg_backend_pid() AS pid, current_setting('application_name') AS name",
      )
      await holder.query('COMMIT')
      await holder.end()
      const { pid, name } = (await asked).rows[0]
      expect(pid).toBe(holderPid)
      expect(name).toBe('beyond-the-pool')
      await waiter.end()
    },
  )

  test('a server connection that died while idle is replaced at checkout', async () => {
    const proxy = await pooledProxy({ size: 1 })
    const first = await connect(proxy)
    const pid = await backendPid(first)
    await first.end()
    // With a timeout, pg_terminate_backend returns once the backend has exited.
    await adminQuery(`SELECT pg_terminate_backend(${pid}, 5000)`)
    const second = await connect(proxy)
    expect(await backendPid(second)).not.toBe(pid)
    await second.end()
  })

  test('idle connections close after idleTimeoutMs; minIdle are opened and kept', async () => {
    const proxy = await pooledProxy({ size: 3, idleTimeoutMs: 300, minIdle: 1 })
    const clients = await Promise.all([connect(proxy), connect(proxy), connect(proxy)])
    const before = await backendsOf(db.name)
    await Promise.all(clients.map((client) => client.end()))
    expect(before).toBeGreaterThanOrEqual(3)
    // Every connection idles out; the sweep then opens one for minIdle.
    await expect.poll(() => backendsOf(db.name), { timeout: 5000, interval: 100 }).toBe(1)
  })

  test('a connection older than maxLifetimeMs is not lent again', async () => {
    const proxy = await pooledProxy({ size: 1, maxLifetimeMs: 200 })
    const first = await connect(proxy)
    const pid = await backendPid(first)
    await first.end()
    await expect
      .poll(
        async () =>
          (await adminQuery(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ${pid}`))
            .rows[0].n,
        { timeout: 5000 },
      )
      .toBe(0)
    const second = await connect(proxy)
    expect(await backendPid(second)).not.toBe(pid)
    await second.end()
  })

  test.each(['session', 'transaction'])(
    '%s mode: pgbench -C, four clients on one thread, runs through a pool of 2',
    async (mode) => {
      const proxy = await pooledProxy({ mode, size: 2, waitTimeoutMs: 3000 })
      const run = (args: string[]) =>
        runCommand(pgBin('pgbench'), [...args, proxy.url('postgres', db.name)], {
          env: { PGPASSWORD: POOL_PASSWORD, PGCONNECT_TIMEOUT: '5' },
        })
      if (mode === 'session') expect((await run(['-i', '-s', '1', '-q'])).code).toBe(0)
      // A pgbench thread blocks in connect: a client greeted only once lent a connection would
      // wait there for the connections of the clients beside it, which cannot give them back.
      const result = await run(['-S', '-C', '-c', '4', '-j', '1', '-t', '25', '-n'])
      expect(result.stderr).toBe('')
      expect(result.stdout).toMatch(/number of transactions actually processed: 100\/100/)
      expect(result.stdout).toMatch(/number of failed transactions: 0 /)
      expect(await backendsOf(db.name)).toBeLessThanOrEqual(2)
    },
  )
})
