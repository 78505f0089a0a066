import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import type net from 'node:net'
import tls from 'node:tls'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { serialize } from 'pg-protocol'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import {
  createSelfSignedCert,
  startAuthCluster,
  type AuthCluster,
  type CertFiles,
} from '../support/auth-cluster.js'
import { parseConfig } from '../../src/config/load.js'
import { installSql } from '../../src/schema/install.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { waitFor } from './support/wait.js'
import { generator, mutate } from './support/mutate.js'
import { backendMessages, connectRaw, sslRequest, startupMessage } from './support/wire.js'

// The native relay over TLS: the addon owns the TLS connections (src/native/tls-channel.c) and
// the relay reads and writes them itself, on either leg or both.

const fencing = { tables: [{ name: 'tls_counters' }] }

let cluster: AuthCluster
let workDir: string
let proxyCert: CertFiles

beforeAll(async () => {
  cluster = await startAuthCluster()
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-native-tls-'))
  proxyCert = await createSelfSignedCert(workDir)
  await superuser(async (client) => {
    await client.query('CREATE TABLE tls_counters (id int PRIMARY KEY, hits int NOT NULL)')
    await client.query('INSERT INTO tls_counters VALUES (1, 0)')
    await client.query(installSql(parseConfig({ fencing }).fencing))
  })
})

afterAll(async () => {
  await cluster?.stop()
  rmSync(workDir, { recursive: true, force: true })
})

async function superuser<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: cluster.superuserUrl })
  await client.connect()
  try {
    return await work(client)
  } finally {
    await client.end()
  }
}

interface Legs {
  client: boolean
  upstream: boolean
}

const legsConfig = (legs: Legs, relay: 'native' | 'node' = 'native'): ConfigOverrides => ({
  fencing,
  relay,
  ...(legs.client && { tls: { cert: proxyCert.certFile, key: proxyCert.keyFile } }),
  upstream: legs.upstream ? { tls: 'verify-full', ca: cluster.certFile } : { tls: 'disable' },
})

async function connectThrough(proxy: TestProxy, legs: Legs): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: proxy.url('postgres', 'postgres'),
    ssl: legs.client ? { rejectUnauthorized: false } : false,
    connectionTimeoutMillis: 5000,
  })
  await client.connect()
  return client
}

/** Traffic that spans many TLS records both ways, an error, and fenced writes. */
async function exercise(client: pg.Client, token: number): Promise<void> {
  const { rows } = await client.query(
    'SELECT i, repeat(md5(i::text), 40) AS text FROM generate_series(1, 3000) AS i',
  )
  expect(rows).toHaveLength(3000)
  expect(rows[2999].text).toHaveLength(32 * 40)
  const long = 'y'.repeat(300_000)
  const echoed = await client.query(`SELECT length('${long}') AS n`)
  expect(echoed.rows[0].n).toBe(300_000)
  await expect(client.query('SELECT 1/0')).rejects.toMatchObject({ code: '22012' })
  const sql = `UPDATE tls_counters SET hits = hits + 1 WHERE id = 1 /* fencing_token=${token} */`
  expect((await client.query(sql)).rowCount).toBe(1)
  const stale = client.query('UPDATE tls_counters SET hits = 0 WHERE id = 1 /* fencing_token=1 */')
  await expect(stale).rejects.toMatchObject({ code: 'PF409' })
}

describe('TLS sessions on the native relay', () => {
  const cases: [string, Legs][] = [
    ['upstream TLS', { client: false, upstream: true }],
    ['client TLS', { client: true, upstream: false }],
    ['TLS on both legs', { client: true, upstream: true }],
  ]
  let token = 10
  for (const [name, legs] of cases) {
    test(`${name}: relayed natively, with large results, large queries, errors and fencing`, async () => {
      const proxy = await startTestProxy(legsConfig(legs), cluster.superuserUrl)
      try {
        const client = await connectThrough(proxy, legs)
        const { rows } = await client.query(
          'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
        )
        expect(rows[0].ssl).toBe(legs.upstream)
        expect(proxy.nativeSessionCount()).toBe(1)
        await exercise(client, ++token)
        expect(proxy.nativeSessionCount()).toBe(1)
        await client.end()
        await waitFor(() => proxy.nativeSessionCount() === 0, { what: 'the session to end' })
      } finally {
        await proxy.close()
      }
    })
  }

  test('relay: node keeps TLS sessions in JavaScript, with the same results', async () => {
    const legs = { client: true, upstream: true }
    const proxy = await startTestProxy(legsConfig(legs, 'node'), cluster.superuserUrl)
    try {
      const client = await connectThrough(proxy, legs)
      await exercise(client, ++token)
      expect(proxy.nativeSessionCount()).toBe(0)
      await client.end()
    } finally {
      await proxy.close()
    }
  })

  test('a backend terminated on the server reaches the TLS client, and the session ends', async () => {
    const legs = { client: true, upstream: true }
    const proxy = await startTestProxy(legsConfig(legs), cluster.superuserUrl)
    try {
      const client = await connectThrough(proxy, legs)
      const errors: Error[] = []
      client.on('error', (err) => errors.push(err))
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
      expect(proxy.nativeSessionCount()).toBe(1)
      await superuser((admin) => admin.query('SELECT pg_terminate_backend($1)', [pid]))
      await waitFor(() => errors.length > 0, { what: 'the client to learn of it' })
      expect(errors[0]).toMatchObject({ code: '57P01' })
      await waitFor(() => proxy.nativeSessionCount() === 0, { what: 'the session to end' })
    } finally {
      await proxy.close()
    }
  })

  test('no session tickets follow the handshake, as from PostgreSQL itself', async () => {
    const proxy = await startTestProxy(
      legsConfig({ client: true, upstream: false }),
      cluster.superuserUrl,
    )
    try {
      const raw = await connectRaw(proxy.port)
      raw.write(sslRequest())
      await once(raw, 'data')
      const secure = tls.connect({ socket: raw, rejectUnauthorized: false })
      let tickets = 0
      secure.on('session', () => tickets++)
      await once(secure, 'secureConnect')
      expect(secure.getProtocol()).toBe('TLSv1.3')
      secure.write(startupMessage('postgres', 'postgres'))
      // Tickets would come before the first answer, right after the handshake.
      await once(secure, 'data')
      expect(tickets).toBe(0)
      secure.destroy()
    } finally {
      await proxy.close()
    }
  })

  test('at shutdown an idle TLS session is told why over TLS', async () => {
    const legs = { client: true, upstream: true }
    const proxy = await startTestProxy(legsConfig(legs), cluster.superuserUrl)
    const client = await connectThrough(proxy, legs)
    const errors: Error[] = []
    client.on('error', (err) => errors.push(err))
    await client.query('SELECT 1')
    expect(proxy.nativeSessionCount()).toBe(1)
    await proxy.close()
    await waitFor(() => errors.length > 0, { what: 'the client to learn of it' })
    expect(errors[0]).toMatchObject({ code: '57P01' })
  })
})

/** A raw session logged in over TLS: the TLS socket, and the TCP socket under it. */
async function tlsSession(port: number): Promise<{ secure: tls.TLSSocket; raw: net.Socket }> {
  const raw = await connectRaw(port)
  raw.write(sslRequest())
  const [answer] = (await once(raw, 'data')) as [Buffer]
  expect(answer.toString()).toBe('S')
  const secure = tls.connect({ socket: raw, rejectUnauthorized: false })
  secure.on('error', () => {}) // the proxy may cut a broken session short
  await once(secure, 'secureConnect')
  let received = Buffer.alloc(0)
  secure.write(startupMessage('postgres', 'postgres'))
  while (!backendMessages(received).some((message) => message.type === 'Z')) {
    const [chunk] = (await once(secure, 'data')) as [Buffer]
    received = Buffer.concat([received, chunk])
  }
  secure.resume()
  return { secure, raw }
}

/** Statements after login: a query, a fenced write, an extended-protocol round, a COPY end. */
const sessionTraffic = Buffer.concat([
  serialize.query('SELECT 1; /*fencing_token=50*/ UPDATE tls_counters SET hits = 1 WHERE id = 1'),
  serialize.parse({ name: 's1', text: 'DELETE FROM tls_counters WHERE id = $1', types: [23] }),
  serialize.bind({ statement: 's1', values: ['7'] }),
  serialize.execute({}),
  serialize.sync(),
  serialize.copyData(Buffer.from('1\t2\n')),
  serialize.end(),
])

test('mutated TLS sessions and garbage under TLS each end with a closed connection; the proxy keeps serving', async () => {
  const legs = { client: true, upstream: true }
  const proxy = await startTestProxy(legsConfig(legs), cluster.superuserUrl)
  try {
    for (let i = 0; i < 60; i++) {
      const random = generator(i + 1)
      const { secure, raw } = await tlsSession(proxy.port)
      expect(proxy.nativeSessionCount()).toBe(1)
      const closed = once(raw, 'close')
      const bytes = mutate(sessionTraffic, random)
      for (let at = 0; at < bytes.length;) {
        const size = 1 + Math.floor(random() * 64)
        // Every third session also puts bytes under TLS, into the record stream itself.
        if (i % 3 === 0 && at > bytes.length / 2) raw.write(bytes.subarray(at, at + size))
        else secure.write(bytes.subarray(at, at + size))
        at += size
      }
      secure.end()
      await closed
    }
    await waitFor(() => proxy.nativeSessionCount() === 0, { what: 'the sessions to end' })
    const client = await connectThrough(proxy, legs)
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await client.end()
  } finally {
    await proxy.close()
  }
})
