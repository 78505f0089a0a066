import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import tls from 'node:tls'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest'
import { NativeLogins } from '../../src/auth/native-login.js'
import { LoginOutcome } from '../../src/auth/login-codes.js'
import { createSelfSignedCert, type CertFiles } from '../support/auth-cluster.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { descriptorsOf, openDescriptors, openedSince } from '../support/descriptors.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import {
  backendMessages,
  closedWithin,
  connectRaw,
  errorCode,
  sslRequest,
} from '../e2e/support/wire.js'

/**
 * With its TLS handshake in C, a pooled client's login inside TLS runs in C too, on the
 * channel's plaintext end (NativeLogins.login, its watch not kept: the relay reads the TLS
 * connection itself); what C leaves to JavaScript goes on there, still inside TLS.
 */

let workDir: string
let cert: CertFiles
let db: TestDatabase
const logins = vi.spyOn(NativeLogins.prototype, 'login')

beforeAll(async () => {
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-login-tls-'))
  cert = await createSelfSignedCert(workDir)
  db = await createTestDatabase('native_login_tls')
})

afterAll(async () => {
  await db?.drop()
  rmSync(workDir, { recursive: true, force: true })
})

const SSL = { rejectUnauthorized: false }

/** How the logins in C that ran inside TLS since `from` ended. */
async function outcomesInsideTls(from: number): Promise<LoginOutcome[]> {
  const inside = logins.mock.calls.map((call, i) => ({ call, i })).slice(from)
  const ran = inside.filter(({ call }) => call[1] === false)
  return Promise.all(ran.map(async ({ i }) => (await logins.mock.results[i]!.value).outcome))
}

describe.each(['session', 'transaction'] as const)('a %s pool with client TLS', (mode) => {
  let proxy: TestProxy

  beforeAll(async () => {
    proxy = await startTestProxy({
      pool: { mode, size: 2 },
      auth: { file: writeUserlist() },
      tls: { cert: cert.certFile, key: cert.keyFile },
      relay: 'native',
    })
  })

  afterAll(async () => {
    await proxy?.close()
  })

  /** A node-postgres client logged in over TLS, and the ends of its connection at the proxy. */
  async function connected() {
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
      ssl: SSL,
    })
    await client.connect()
    const stream = (client as unknown as { connection: { stream: tls.TLSSocket } }).connection
      .stream
    return { client, stream, ends: { local: proxy.port, remote: stream.localPort! } }
  }

  test('node-postgres logs in by the login in C inside TLS, and its connection closes with it', async () => {
    const from = logins.mock.calls.length
    const first = await connected()
    await first.client.query('SELECT 1')
    await first.client.end()
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
    // The pool's server connection is open now, C watching it idle for the next client (a
    // transaction pool's once a client has left it): a client adds only descriptors of its own.
    const before = openDescriptors()
    const { client, stream, ends } = await connected()
    expect(stream.encrypted).toBe(true)
    for (let i = 0; i < 3; i++)
      expect((await client.query('SELECT $1::int + 1 AS v', [i])).rows).toEqual([{ v: i + 1 }])
    expect(await outcomesInsideTls(from)).toEqual([
      LoginOutcome.Authenticated,
      LoginOutcome.Authenticated,
    ])
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
    // The login's duplicate of the plaintext end went with it, not at a later collection.
    await vi.waitFor(() => expect(openedSince(before, db.port)).toEqual([]))
  })

  test('psql with sslmode=require logs in; a wrong password is 28P01, as outside TLS', async () => {
    const from = logins.mock.calls.length
    const psql = await runCommand(pgBin('psql'), [
      '-XAtc',
      'SELECT 7',
      proxy.url('postgres', db.name, POOL_PASSWORD) + '?sslmode=require',
    ])
    expect(psql.stdout.trim()).toBe('7')
    const wrong = new pg.Client({
      connectionString: proxy.url('postgres', db.name, 'wrong'),
      ssl: SSL,
    })
    await expect(wrong.connect()).rejects.toMatchObject({
      code: '28P01',
      message: 'password authentication failed for user "postgres"',
    })
    expect(await outcomesInsideTls(from)).toEqual([
      LoginOutcome.Authenticated,
      LoginOutcome.Refused,
    ])
  })
})

describe('what the login in C leaves to JavaScript goes on inside TLS', () => {
  let proxy: TestProxy

  beforeAll(async () => {
    proxy = await startTestProxy({
      pool: { mode: 'session', size: 1 },
      auth: { file: writeUserlist() },
      tls: { cert: cert.certFile, key: cert.keyFile },
      admin: { users: ['postgres'] },
      limits: { startupTimeoutMs: 500 },
      relay: 'native',
    })
  })

  afterAll(async () => {
    await proxy?.close()
  })

  test('the admin console logs in over TLS', async () => {
    const from = logins.mock.calls.length
    const console = new pg.Client({
      connectionString: proxy.url('postgres', 'pgfence', POOL_PASSWORD),
      ssl: SSL,
    })
    await console.connect()
    const { rows } = await console.query('SHOW CONFIG')
    expect(rows.find((row) => row.key === 'pool.mode')?.value).toBe('session')
    await console.end()
    expect(await outcomesInsideTls(from)).toEqual([LoginOutcome.Fallback])
  })

  /** A client inside TLS with the proxy, having sent nothing there yet. */
  async function insideTls(): Promise<tls.TLSSocket> {
    const raw = await connectRaw(proxy.port)
    raw.write(sslRequest())
    const [answer] = (await once(raw, 'data')) as [Buffer]
    expect(answer.toString()).toBe('S')
    const secure = tls.connect({ socket: raw, rejectUnauthorized: false })
    await once(secure, 'secureConnect')
    return secure
  }

  test('a client that sends nothing inside TLS is closed after startupTimeoutMs', async () => {
    const secure = await insideTls()
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(1))
    await once(secure, 'close')
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
  })

  test('garbage for a ClientHello, or for a StartupMessage inside TLS, closes the connection; the next client logs in', async () => {
    const raw = await connectRaw(proxy.port)
    raw.write(sslRequest())
    await once(raw, 'data')
    raw.write(Buffer.from('GET / HTTP/1.1\r\nHost: pgfence\r\n\r\n'))
    await closedWithin(raw, 5000)
    const secure = await insideTls()
    secure.on('error', () => {})
    secure.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 3, 0, 0]))
    await once(secure, 'close')
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
      ssl: SSL,
    })
    await client.connect()
    expect((await client.query('SELECT 3 AS v')).rows).toEqual([{ v: 3 }])
    await client.end()
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
  })

  test('bytes sent with the SSLRequest, before its answer, are refused (08P01) in plaintext', async () => {
    const raw = await connectRaw(proxy.port)
    raw.write(Buffer.concat([sslRequest(), Buffer.from('stray bytes')]))
    const { received } = await closedWithin(raw, 5000)
    const [error] = backendMessages(received)
    expect(error && errorCode(error)).toBe('08P01')
    expect(received.toString('latin1')).toContain('received unencrypted data after SSL request')
  })

  test('a second SSLRequest inside TLS is refused (08P01)', async () => {
    const secure = await insideTls()
    let received = Buffer.alloc(0)
    secure.on('data', (chunk: Buffer) => (received = Buffer.concat([received, chunk])))
    secure.write(sslRequest())
    await once(secure, 'close')
    const [error] = backendMessages(received)
    expect(error && errorCode(error)).toBe('08P01')
    expect(received.toString('latin1')).toContain('unexpected encryption request after encryption')
  })
})
