import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { capturingLogger } from '../fencing-e2e/support.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'

let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('pool_metrics')
})

afterAll(async () => {
  await db?.drop()
})

/** A pool of one server connection, with the admin endpoint. */
function startPool(
  waitTimeoutMs: number,
  logs: Record<string, unknown>[] = [],
  mode: 'session' | 'transaction' = 'session',
) {
  return startTestProxy(
    {
      pool: { mode, size: 1, waitTimeoutMs },
      auth: { file: writeUserlist() },
      admin: { listen: { port: 0 }, users: ['postgres'] },
    },
    db.url,
    { logger: capturingLogger(logs) },
  )
}

async function connect(proxy: TestProxy): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
  client.on('error', () => {})
  await client.connect()
  return client
}

async function metrics(proxy: TestProxy): Promise<string> {
  return (await fetch(`http://127.0.0.1:${proxy.adminPort}/metrics`)).text()
}

/** The value of one series of the test database's pool; `labels` follow database and user. */
function poolSeries(body: string, name: string, labels = ''): number | undefined {
  const prefix = `${name}{database="${db.name}",user="postgres"${labels}} `
  const line = body.split('\n').find((l) => l.startsWith(prefix))
  return line === undefined ? undefined : Number(line.slice(prefix.length))
}

async function showPools(proxy: TestProxy): Promise<Record<string, string>[]> {
  const console = new pg.Client({
    connectionString: proxy.url('postgres', 'pgfence', POOL_PASSWORD),
  })
  await console.connect()
  try {
    return (await console.query('SHOW POOLS')).rows
  } finally {
    await console.end()
  }
}

describe('a session pool of one with a second client waiting', () => {
  let proxy: TestProxy
  const logs: Record<string, unknown>[] = []

  beforeAll(async () => {
    proxy = await startPool(60_000, logs)
  })

  afterAll(async () => proxy?.close())

  test('metrics, SHOW POOLS and the log name the pool and its queue', async () => {
    const holder = await connect(proxy)
    const waiter = connect(proxy)
    await expect
      .poll(async () => poolSeries(await metrics(proxy), 'pgfence_pool_clients_waiting'))
      .toBe(1)
    const body = await metrics(proxy)
    expect(poolSeries(body, 'pgfence_pool_server_connections', ',state="active"')).toBe(1)
    expect(poolSeries(body, 'pgfence_pool_server_connections', ',state="idle"')).toBe(0)
    expect(poolSeries(body, 'pgfence_pool_max_wait_seconds')).toBeGreaterThanOrEqual(0)
    expect(body).toContain('pgfence_server_connections{state="active"} 1')
    expect(await showPools(proxy)).toEqual([
      expect.objectContaining({
        database: db.name,
        user: 'postgres',
        cl_active: '1',
        cl_waiting: '1',
        sv_active: '1',
        sv_idle: '0',
        sv_login: '0',
        pool_mode: 'session',
      }),
    ])
    expect(logs).toContainEqual(
      expect.objectContaining({
        level: 30,
        pool: `postgres@${db.name}`,
        msg: 'a client waits for a server connection',
        waiting: 1,
      }),
    )
    await holder.end()
    const second = await waiter
    expect((await second.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await second.end()
    await expect
      .poll(async () =>
        poolSeries(await metrics(proxy), 'pgfence_pool_server_connections', ',state="idle"'),
      )
      .toBe(1)
    const after = await metrics(proxy)
    expect(poolSeries(after, 'pgfence_pool_wait_seconds_count')).toBe(1)
    expect(poolSeries(after, 'pgfence_pool_clients_waiting')).toBe(0)
    expect(after).toContain('pgfence_server_connections{state="idle"} 1')
    expect(await showPools(proxy)).toEqual([
      expect.objectContaining({ cl_active: '0', cl_waiting: '0', sv_active: '0', sv_idle: '1' }),
    ])
  })
})

test('transaction mode: a client whose query waits counts as waiting, not active', async () => {
  const proxy = await startPool(60_000, [], 'transaction')
  try {
    const [holder, waiter] = [await connect(proxy), await connect(proxy)]
    await holder.query('BEGIN')
    const answer = waiter.query('SELECT 7 AS seven')
    await expect
      .poll(async () => poolSeries(await metrics(proxy), 'pgfence_pool_clients_waiting'))
      .toBe(1)
    expect(await showPools(proxy)).toEqual([
      expect.objectContaining({
        cl_active: '1',
        cl_waiting: '1',
        sv_active: '1',
        sv_idle: '0',
        pool_mode: 'transaction',
      }),
    ])
    await holder.query('COMMIT')
    expect((await answer).rows).toEqual([{ seven: 7 }])
    expect(poolSeries(await metrics(proxy), 'pgfence_pool_wait_seconds_count')).toBe(1)
    await Promise.all([holder.end(), waiter.end()])
  } finally {
    await proxy.close()
  }
})

test('a client that gives up waiting is counted and logged with the pool', async () => {
  const logs: Record<string, unknown>[] = []
  const proxy = await startPool(200, logs)
  try {
    const holder = await connect(proxy)
    // Greeted from the pool, it waits with its first statement.
    const waiter = await connect(proxy)
    await expect(waiter.query('SELECT 1')).rejects.toMatchObject({ code: '08P01' })
    const body = await metrics(proxy)
    expect(poolSeries(body, 'pgfence_pool_wait_timeouts_total')).toBe(1)
    // Only waits that ended with a server connection are observed.
    expect(poolSeries(body, 'pgfence_pool_wait_seconds_count')).toBeUndefined()
    expect(logs).toContainEqual(
      expect.objectContaining({
        pool: `postgres@${db.name}`,
        level: 30,
        msg: 'a client gave up waiting for a server connection',
      }),
    )
    await holder.end()
  } finally {
    await proxy.close()
  }
})

/** Destroys a node-postgres client's socket, as a client that vanishes does. */
const vanish = (client: pg.Client) =>
  (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy()

test('transaction mode: a client that closes while its query waits leaves the queue at once', async () => {
  const logs: Record<string, unknown>[] = []
  const proxy = await startPool(60_000, logs, 'transaction')
  try {
    const [holder, waiter] = [await connect(proxy), await connect(proxy)]
    await holder.query('BEGIN')
    waiter.query('SELECT 7').catch(() => {})
    const waiting = async () => poolSeries(await metrics(proxy), 'pgfence_pool_clients_waiting')
    await expect.poll(waiting).toBe(1)
    vanish(waiter)
    await expect.poll(waiting).toBe(0)
    expect(await showPools(proxy)).toEqual([
      expect.objectContaining({ cl_active: '1', cl_waiting: '0', sv_active: '1' }),
    ])
    expect(logs).toContainEqual(
      expect.objectContaining({ msg: 'a client left the queue', waiting: 0 }),
    )
    // The connection goes idle once the holder commits: no client it was handed to waited.
    await holder.query('COMMIT')
    await expect
      .poll(async () =>
        poolSeries(await metrics(proxy), 'pgfence_pool_server_connections', ',state="idle"'),
      )
      .toBe(1)
    expect(poolSeries(await metrics(proxy), 'pgfence_pool_wait_seconds_count') ?? 0).toBe(0)
    await holder.end()
  } finally {
    await proxy.close()
  }
})
