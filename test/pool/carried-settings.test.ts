import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { POOL_PASSWORD, writeUserlist } from './support.js'

// One server connection, so that each client gets the one the client before it left.
let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('pool_carried_settings')
  proxy = await startTestProxy({
    pool: { mode: 'session', size: 1 },
    auth: { file: writeUserlist() },
  })
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

interface Login {
  client: pg.Client
  /** The ParameterStatus values of the greeting, by name. */
  greeting: Map<string, string>
}

async function login(settings: { application_name?: string; options?: string }): Promise<Login> {
  const client = new pg.Client({
    connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    ...settings,
  })
  const greeting = new Map<string, string>()
  const connection = (client as unknown as { connection: pg.Connection }).connection
  connection.on('parameterStatus', (message: { parameterName: string; parameterValue: string }) =>
    greeting.set(message.parameterName, message.parameterValue),
  )
  await client.connect()
  return { client, greeting }
}

async function settingsOf({ client }: Login): Promise<{ app: string; style: string }> {
  const { rows } = await client.query(
    "SELECT current_setting('application_name') AS app, current_setting('DateStyle') AS style",
  )
  return rows[0]
}

/** The pooled backend: its last statement and when it started (after the client before left). */
async function pooledBackend(): Promise<{ query: string; started: Date; idle: boolean }> {
  const { rows } = await adminQuery(
    `SELECT query, query_start AS started, state = 'idle' AS idle FROM pg_stat_activity
     WHERE datname = '${db.name}' AND backend_type = 'client backend'`,
  )
  expect(rows).toHaveLength(1)
  return rows[0]
}

/** Ends the client and waits until its connection was reset and its settings carried. */
async function leave({ client }: Login, carried: string): Promise<void> {
  await client.end()
  await expect
    .poll(async () => {
      const backend = await pooledBackend()
      return backend.idle && backend.query.includes(carried)
    })
    .toBe(true)
}

describe('session mode carries startup settings to the next client', () => {
  test('the same settings again: in force at login, with no settings statement', async () => {
    const first = await login({ application_name: 'carried-a', options: '-c DateStyle=German' })
    expect(await settingsOf(first)).toEqual({ app: 'carried-a', style: 'German, DMY' })
    await leave(first, "'German'")
    const { started } = await pooledBackend()
    const again = await login({ application_name: 'carried-a', options: '-c DateStyle=German' })
    // Nothing ran on the backend since the settings were carried.
    expect((await pooledBackend()).started).toEqual(started)
    expect(again.greeting.get('application_name')).toBe('carried-a')
    expect(again.greeting.get('DateStyle')).toBe('German, DMY')
    expect(await settingsOf(again)).toEqual({ app: 'carried-a', style: 'German, DMY' })
    await leave(again, "'German'")
  })

  test('a client that asks for less gets the defaults back, in its greeting too', async () => {
    const fewer = await login({ application_name: 'carried-b' })
    expect(fewer.greeting.get('application_name')).toBe('carried-b')
    expect(fewer.greeting.get('DateStyle')).toBe('ISO, MDY')
    expect(await settingsOf(fewer)).toEqual({ app: 'carried-b', style: 'ISO, MDY' })
    await leave(fewer, "'carried-b'")
    const none = await login({})
    expect(none.greeting.get('application_name')).toBe('')
    expect(await settingsOf(none)).toEqual({ app: '', style: 'ISO, MDY' })
    await none.client.end()
  })

  test('client_encoding is not carried: pgfence reads its own statements in UTF-8', async () => {
    const latin = await login({
      application_name: 'carried-d',
      options: '-c client_encoding=LATIN1',
    })
    await leave(latin, "'carried-d'")
    expect((await pooledBackend()).query).not.toContain('LATIN1')
    const next = await login({ application_name: 'carried-d' })
    expect(next.greeting.get('client_encoding')).toBe('UTF8')
    await next.client.end()
  })

  test('RESET goes back to the connection default, as after a settings statement', async () => {
    const first = await login({ application_name: 'carried-c' })
    await leave(first, "'carried-c'")
    const second = await login({ application_name: 'carried-c' })
    await second.client.query('RESET application_name')
    expect(await settingsOf(second)).toEqual({ app: '', style: 'ISO, MDY' })
    await second.client.end()
  })

  test('a setting named in another case is greeted and carried under the server’s name', async () => {
    const zoned = await login({ options: '-c timezone=Asia/Tokyo' })
    expect(zoned.greeting.get('TimeZone')).toBe('Asia/Tokyo')
    expect((await zoned.client.query('SHOW TimeZone')).rows[0].TimeZone).toBe('Asia/Tokyo')
    await leave(zoned, "'Asia/Tokyo'")
    const { started } = await pooledBackend()
    const again = await login({ options: '-c timezone=Asia/Tokyo' })
    expect((await pooledBackend()).started).toEqual(started)
    expect(again.greeting.get('TimeZone')).toBe('Asia/Tokyo')
    await again.client.end()
  })
})
