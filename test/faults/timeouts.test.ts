import { setTimeout as delay } from 'node:timers/promises'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { relayUnderTest, type ConfigOverrides } from '../support/proxy.js'
import { waitFor } from '../e2e/support/wait.js'
import { keepaliveTimers } from '../support/keepalive-timers.js'
import {
  backendsGone,
  connectionError,
  sqlstateOf,
  startFaultStack,
  type FaultStack,
} from './support.js'

let db: TestDatabase
let admin: pg.Client
let stack: FaultStack | undefined

beforeAll(async () => {
  db = await createTestDatabase('faults_timeouts')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query('CREATE TABLE locked (id int PRIMARY KEY)')
  await admin.query('INSERT INTO locked VALUES (1)')
})

afterEach(async () => {
  await stack?.close()
  stack = undefined
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
})

async function start(overrides: ConfigOverrides): Promise<FaultStack> {
  stack = await startFaultStack(db, overrides)
  return stack
}

/** Milliseconds a promise takes to settle, and its SQLSTATE. */
async function timed(promise: Promise<unknown>): Promise<{ code: string; ms: number }> {
  const started = performance.now()
  const code = await sqlstateOf(promise)
  return { code, ms: performance.now() - started }
}

test('keepalive probes are armed on the client and the upstream socket', async () => {
  const { relay, proxy, client } = await start({ tcpKeepalive: { idleMs: 7000 } })
  await (await client()).query('SELECT 1')
  let upstream: (number | null)[] = []
  let clients: (number | null)[] = []
  await waitFor(
    () => {
      upstream = keepaliveTimers(`dport = :${relay.port}`)
      clients = keepaliveTimers(`sport = :${proxy.port}`)
      return [...upstream, ...clients].every((seconds) => seconds !== null)
    },
    { what: 'keepalive timers once no data is in flight' },
  )
  expect(upstream).toHaveLength(1)
  expect(clients).toHaveLength(1)
  for (const seconds of [...upstream, ...clients]) expect(seconds!).toBeLessThanOrEqual(7)
})

test('a query to a black-holed upstream fails within queryTimeoutMs, outcome unknown', async () => {
  const { relay, proxy, client } = await start({ limits: { queryTimeoutMs: 3000 } })
  const session = await client()
  await session.query('SELECT 1')
  if (relayUnderTest() !== 'node') expect(proxy.nativeSessionCount()).toBe(1)
  relay.set('freeze')
  const { code, ms } = await timed(session.query('SELECT 2'))
  // Outside a transaction block the statement may have committed: 08007, never 57014.
  expect(code).toBe('08007')
  expect(ms).toBeGreaterThan(2900)
  expect(ms).toBeLessThan(5000)
})

test('a slow statement inside a transaction is cancelled on the server and answered 57014', async () => {
  const { client } = await start({ limits: { queryTimeoutMs: 1000 } })
  const session = await client('pgfence-faults-slow-statement')
  await session.query('BEGIN')
  const { code, ms } = await timed(session.query('SELECT pg_sleep(30)'))
  expect(code).toBe('57014')
  expect(ms).toBeLessThan(3000)
  await backendsGone(admin, 'pgfence-faults-slow-statement')
})

test('a login to a silent upstream fails with 08006 within connectTimeoutMs', async () => {
  const { relay, client } = await start({ upstream: { connectTimeoutMs: 2000, tls: 'prefer' } })
  relay.set('silent')
  const { code, ms } = await timed(client())
  expect(code).toBe('08006')
  expect(ms).toBeGreaterThan(1900)
  expect(ms).toBeLessThan(3500)
})

test.each(['disable', 'prefer'] as const)(
  'an upstream that closes during startup gives 08006 (upstream.tls %s)',
  async (tls) => {
    const { relay, client } = await start({ upstream: { tls } })
    relay.set('closeDuringStartup')
    const { code, ms } = await timed(client())
    expect(code).toBe('08006')
    expect(ms).toBeLessThan(2000)
  },
)

test('idle in transaction too long: 25P03, and the row locks are released', async () => {
  const { client } = await start({ limits: { idleTransactionTimeoutMs: 1000 } })
  const session = await client('pgfence-faults-idle-tx')
  await session.query('BEGIN')
  await session.query('SELECT * FROM locked WHERE id = 1 FOR UPDATE')
  const started = performance.now()
  expect(await connectionError(session)).toBe('25P03')
  expect(performance.now() - started).toBeLessThan(2500)
  await backendsGone(admin, 'pgfence-faults-idle-tx')
  await waitFor(
    async () =>
      (await sqlstateOf(admin.query('SELECT * FROM locked WHERE id = 1 FOR UPDATE NOWAIT'))) ===
      'ok',
    { timeoutMs: 2000, what: 'the row lock to be released' },
  )
})

test('a session idle outside a transaction is left alone by both timeouts', async () => {
  const { client } = await start({ limits: { queryTimeoutMs: 300, idleTransactionTimeoutMs: 300 } })
  const session = await client()
  await session.query('SELECT 1')
  // Not synchronisation: a window three times the timeouts in which no error may arrive.
  const window = delay(1000, 'quiet')
  const failed = connectionError(session).then(() => 'cut')
  expect(await Promise.race([window, failed])).toBe('quiet')
  expect((await session.query('SELECT 2 AS n')).rows[0].n).toBe(2)
})
