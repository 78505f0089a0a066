import pg from 'pg'
import { afterAll, beforeAll, expect } from 'vitest'
import { sendCancelRequest } from '../e2e/support/wire.js'
import { fencingConfig, installFencing, invoicesSql } from '../fence/support.js'
import {
  adminQuery,
  createTestDatabase,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { backendsOf, POOL_PASSWORD, writeUserlist } from './support.js'

/** The acceptance checks both pool modes pass: a way to connect, and the pool's database. */
export interface PooledTarget {
  connect(): Promise<pg.Client>
  database: string
}

/** A test file's database with fenced invoices behind a pooling proxy. */
export interface FencedPool extends PooledTarget {
  /** URL through the proxy, with `password` (the userlist's by default). */
  url(password?: string): string
  proxy: TestProxy
}

/** Sets up (beforeAll) and tears down (afterAll) a FencedPool for the calling test file. */
export function fencedPool(label: string, mode: 'session' | 'transaction', size: number) {
  let db: TestDatabase
  let proxy: TestProxy
  beforeAll(async () => {
    db = await createTestDatabase(label)
    await queryOnce(db.url, invoicesSql)
    const fencing = { tables: [{ name: 'invoices', column: 'fencing_token', requireToken: true }] }
    await installFencing(db.url, fencingConfig(fencing))
    const auth = { file: writeUserlist() }
    proxy = await startTestProxy({ pool: { mode, size }, auth, fencing }, db.url)
  })
  afterAll(async () => {
    await proxy?.close()
    await db?.drop()
  })
  const pool: FencedPool = {
    url: (password = POOL_PASSWORD) => proxy.url('postgres', db.name, password),
    connect: async () => {
      const client = new pg.Client({ connectionString: pool.url() })
      await client.connect()
      return client
    },
    get database() {
      return db.name
    },
    get proxy() {
      return proxy
    },
  }
  return pool
}

export const tokenOf = async (client: pg.Client): Promise<string> =>
  (await client.query("SELECT coalesce(current_setting('app.fencing_token', true), '') AS t"))
    .rows[0].t

/**
 * 30 clients with their own session tokens, interleaving simple and named-prepared writes to
 * their own invoices (ids from `firstId`): each row ends with its client's token, PostgreSQL
 * sees at most `poolSize` backends, and a stale token is refused.
 */
export async function clientsKeepTheirTokens(
  target: PooledTarget,
  poolSize: number,
  firstId: number,
): Promise<void> {
  const ids = [...Array(30).keys()].map((i) => firstId + i)
  const admin = await target.connect()
  await admin.query('SET app.fencing_token = 1')
  for (const id of ids) await admin.query(`INSERT INTO invoices (id, status) VALUES (${id}, 'NEW')`)
  await admin.end()
  const clients = await Promise.all(ids.map(() => target.connect()))
  await Promise.all(clients.map((c, i) => c.query(`SET app.fencing_token = ${ids[i]! + 5000}`)))
  await Promise.all(
    clients.map(async (client, i) => {
      for (let round = 0; round < 4; round++) {
        if (round % 2 === 0)
          await client.query(`UPDATE invoices SET amount = amount + 1 WHERE id = ${ids[i]}`)
        else
          await client.query({
            name: 'bump',
            text: 'UPDATE invoices SET amount = amount + $1 WHERE id = $2',
            values: [1, ids[i]],
          })
      }
    }),
  )
  expect(await backendsOf(target.database)).toBeLessThanOrEqual(poolSize)
  await Promise.all(clients.map((client) => client.end()))
  const check = await target.connect()
  const { rows } = await check.query(
    'SELECT id, amount, fencing_token::int AS token FROM invoices WHERE id = ANY($1) ORDER BY id',
    [ids],
  )
  await check.end()
  expect(rows).toEqual(ids.map((id) => ({ id, amount: 4, token: id + 5000 })))
  const stale = await target.connect()
  await stale.query('SET app.fencing_token = 2')
  await expect(
    stale.query(`UPDATE invoices SET amount = 0 WHERE id = ${firstId}`),
  ).rejects.toMatchObject({ code: 'PF409' })
  await stale.end()
}

/** PostgreSQL's rules for the token: rollback, SET LOCAL, RESET, set_config, DISCARD ALL. */
export async function tokenRules(target: PooledTarget): Promise<void> {
  const client = await target.connect()
  await client.query('SET app.fencing_token = 10')
  expect(await tokenOf(client)).toBe('10')
  await client.query('BEGIN')
  await client.query('SET app.fencing_token = 11')
  await client.query('ROLLBACK')
  expect(await tokenOf(client)).toBe('10')
  await client.query('BEGIN')
  await client.query('SET LOCAL app.fencing_token = 12')
  expect(await tokenOf(client)).toBe('12')
  await client.query('COMMIT')
  expect(await tokenOf(client)).toBe('10')
  await client.query("SELECT set_config('app.fencing_token', '13', true)")
  expect(await tokenOf(client)).toBe('10')
  await client.query("SELECT set_config('app.fencing_token', '14', false)")
  expect(await tokenOf(client)).toBe('14')
  await client.query('RESET app.fencing_token')
  expect(await tokenOf(client)).toBe('')
  await client.query('SET app.fencing_token = 15')
  await client.query('DISCARD ALL')
  expect(await tokenOf(client)).toBe('')
  await client.end()
}

/** Backends of the pool's database running `sql` now. */
async function running(database: string, sql: string): Promise<number> {
  const { rows } = await adminQuery(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${database}' AND query = '${sql}' AND state = 'active'`,
  )
  return rows[0].n
}

/**
 * Two clients run a query each; a cancel request with one client's key stops that client's
 * query only, and the client goes on.
 */
export async function cancelReachesItsBackend(pool: FencedPool): Promise<void> {
  const [target, bystander] = await Promise.all([pool.connect(), pool.connect()])
  const sleeping = target.query('SELECT pg_sleep(30)')
  const other = bystander.query("SELECT pg_sleep(3), 'done' AS outcome")
  await expect.poll(() => running(pool.database, 'SELECT pg_sleep(30)'), { timeout: 5000 }).toBe(1)
  const { processID, secretKey } = target as unknown as { processID: number; secretKey: number }
  await sendCancelRequest(pool.proxy.port, processID, secretKey)
  await expect(sleeping).rejects.toMatchObject({ code: '57014' })
  expect((await other).rows[0].outcome).toBe('done')
  expect((await target.query('SELECT 2 AS two')).rows[0].two).toBe(2)
  await Promise.all([target.end(), bystander.end()])
}
