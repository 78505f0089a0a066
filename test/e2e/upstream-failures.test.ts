import { once } from 'node:events'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { closedPort } from './support/ports.js'

let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('e2e_upstream_failures')
  proxy = await startTestProxy({}, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

test('an unreachable upstream gives the client 08006 promptly', async () => {
  const deadEnd = await startTestProxy({ upstream: { port: await closedPort() } }, db.url)
  try {
    const client = new pg.Client({ connectionString: deadEnd.url() })
    const started = Date.now()
    await expect(client.connect()).rejects.toMatchObject({ code: '08006' })
    expect(Date.now() - started).toBeLessThan(3000)
  } finally {
    await deadEnd.close()
  }
})

test('a terminated backend fails its own client with 57P01 and no other', async () => {
  const victim = new pg.Client({ connectionString: proxy.url() })
  const bystander = new pg.Client({ connectionString: proxy.url() })
  await Promise.all([victim.connect(), bystander.connect()])
  try {
    const { rows } = await victim.query('SELECT pg_backend_pid() AS pid')
    const failure = once(victim, 'error')
    victim.on('error', () => {}) // the lost connection is reported again once it closes
    const terminated = await adminQuery(`SELECT pg_terminate_backend(${rows[0].pid}) AS done`)
    expect(terminated.rows).toEqual([{ done: true }])
    const [error] = (await failure) as [pg.DatabaseError]
    expect(error.code).toBe('57P01')
    const still = await bystander.query('SELECT 2 AS still_working')
    expect(still.rows).toEqual([{ still_working: 2 }])
    const newcomer = new pg.Client({ connectionString: proxy.url() })
    await newcomer.connect()
    expect((await newcomer.query('SELECT 3 AS fresh')).rows).toEqual([{ fresh: 3 }])
    await newcomer.end()
  } finally {
    await Promise.all([victim.end().catch(() => {}), bystander.end()])
  }
})
