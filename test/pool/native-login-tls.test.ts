import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import tls from 'node:tls'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest'
import { LoginOutcome } from '../../src/auth/login-codes.js'
import type { NativeLoginResult } from '../../src/auth/native-login.js'
import { capturingLogger } from '../fencing-e2e/support.js'
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
 * A pooled client's login accepted in C takes TLS up in C too: after 'S' the handshake, then the
 * login, inside TLS on the client's own descriptor. The login may be lent a pool's connection in
 * C there and then; what C leaves to JavaScript goes on through a TLS channel's plaintext end
 * (NativeLoginResult.inside, or a lent login's once JavaScript hears of it), still inside TLS.
 */

/** How the logins in C that ran inside TLS ended, as JavaScript went on from them. */
const tlsOutcomes = vi.hoisted(() => ({ outcomes: [] as number[] }))
vi.mock('../../src/auth/native-login.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/auth/native-login.js')>()
  return {
    ...actual,
    startupAfterNativeLogin: (
      ...args: Parameters<typeof actual.startupAfterNativeLogin>
    ): ReturnType<typeof actual.startupAfterNativeLogin> => {
      const result: NativeLoginResult = args[1]
      if (result.inside) tlsOutcomes.outcomes.push(result.outcome)
      return actual.startupAfterNativeLogin(...args)
    },
  }
})

let workDir: string
let cert: CertFiles
let db: TestDatabase

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

/**
 * A node-postgres client logged in over TLS, with its backend's process id, and the ends of its
 * connection at the proxy.
 */
async function connected(proxy: TestProxy, applicationName = 'inside-tls') {
  const client = new pg.Client({
    connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    application_name: applicationName,
    ssl: SSL,
  })
  await client.connect()
  const stream = (client as unknown as { connection: { stream: tls.TLSSocket } }).connection.stream
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
  return { client, stream, pid, ends: { local: proxy.port, remote: stream.localPort! } }
}

/** How the logins in C that ran inside TLS since `from` (a count of them) ended. */
const outcomesInsideTls = (from: number) => tlsOutcomes.outcomes.slice(from)

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

  test('node-postgres logs in by the login in C inside TLS, and its connection closes with it', async () => {
    const from = tlsOutcomes.outcomes.length
    const first = await connected(proxy)
    await first.client.query('SELECT 1')
    await first.client.end()
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
    // The pool's server connection is open now, C watching it idle for the next client (a
    // transaction pool's once a client has left it): a client adds only descriptors of its own.
    const before = openDescriptors()
    const { client, stream, ends } = await connected(proxy)
    expect(stream.encrypted).toBe(true)
    for (let i = 0; i < 3; i++)
      expect((await client.query('SELECT $1::int + 1 AS v', [i])).rows).toEqual([{ v: i + 1 }])
    // The second is lent the first one's connection in C, inside TLS.
    expect(outcomesInsideTls(from)).toEqual([LoginOutcome.Authenticated])
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
    // The login's duplicate of the plaintext end went with it, not at a later collection.
    await vi.waitFor(() => expect(openedSince(before, db.port)).toEqual([]))
  })

  test('psql with sslmode=require logs in; a wrong password is 28P01, as outside TLS', async () => {
    const from = tlsOutcomes.outcomes.length
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
    expect(outcomesInsideTls(from)).toEqual([LoginOutcome.Authenticated, LoginOutcome.Refused])
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
    const from = tlsOutcomes.outcomes.length
    const console = new pg.Client({
      connectionString: proxy.url('postgres', 'pgfence', POOL_PASSWORD),
      ssl: SSL,
    })
    await console.connect()
    const { rows } = await console.query('SHOW CONFIG')
    expect(rows.find((row) => row.key === 'pool.mode')?.value).toBe('session')
    await console.end()
    expect(outcomesInsideTls(from)).toEqual([LoginOutcome.Fallback])
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
    // Refused in plaintext, with OpenSSL's reason, as PostgreSQL's own log would have it.
    const { received } = await closedWithin(raw, 5000)
    const [error] = backendMessages(received)
    expect(error && errorCode(error)).toBe('08P01')
    expect(received.toString('latin1')).toMatch(/TLS handshake failed: \w/)
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

/**
 * A proxy of `mode` with a pool of one connection and client TLS, its debug log kept: what a
 * lent login inside TLS is seen by.
 */
function lendingInsideTls(mode: 'session' | 'transaction') {
  const logs: Record<string, unknown>[] = []
  const lending = {
    proxy: undefined as unknown as TestProxy,
    /** The sessions lent in C that JavaScript heard of (settled now). */
    lent: () => {
      lending.proxy.nativeSessionCount()
      return logs.filter((l) => l.lent === true && l.msg === 'session relayed natively')
    },
    logged: (msg: string) => logs.filter((l) => l.msg === msg).length,
    /** The pool's one connection, idle again after a client left it. */
    idleAgain: () =>
      vi.waitFor(async () => {
        const console = new pg.Client({
          connectionString: lending.proxy.url('postgres', 'pgfence', POOL_PASSWORD),
          ssl: SSL,
        })
        await console.connect()
        const { rows } = await console.query<Record<string, string>>('SHOW POOLS')
        await console.end()
        expect(rows.find((row) => row.database === db.name)?.sv_idle).toBe('1')
      }),
    /** A client, gone, then one like it: lent the connection the first left, inside TLS. */
    lentAfterAnother: async () => {
      const first = await connected(lending.proxy)
      await first.client.end()
      await lending.idleAgain()
      const second = await connected(lending.proxy)
      expect(second.stream.encrypted).toBe(true)
      expect(second.pid).toBe(first.pid)
      return second
    },
  }

  beforeAll(async () => {
    const logger = capturingLogger(logs)
    logger.level = 'debug'
    lending.proxy = await startTestProxy(
      {
        pool: { mode, size: 1, waitTimeoutMs: 5000 },
        auth: { file: writeUserlist() },
        tls: { cert: cert.certFile, key: cert.keyFile },
        admin: { users: ['postgres'] },
        relay: 'native',
        log: { level: 'debug' },
      },
      undefined,
      { logger },
    )
  })

  afterAll(async () => {
    await lending.proxy?.close()
  })

  return lending
}

describe('a session pool lends a login inside TLS a connection in C', () => {
  const lending = lendingInsideTls('session')
  const { lent, logged, lentAfterAnother } = lending

  test('JavaScript hears of it through a TLS channel; its session goes on, and its goodbye shelves the connection for the next', async () => {
    const before = lent().length
    const { client, ends, pid } = await lentAfterAnother()
    // Settled: JavaScript heard of the lease, and the relay goes on with the TLS connection.
    expect(lent()).toHaveLength(before + 1)
    expect((await client.query('SELECT 5 AS v')).rows).toEqual([{ v: 5 }])
    const shelved = logged('server connection back on the shelf in C')
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await vi.waitFor(() =>
      expect(logged('server connection back on the shelf in C')).toBe(shelved + 1),
    )
    const next = await connected(lending.proxy)
    expect(next.pid).toBe(pid)
    expect(lent()).toHaveLength(before + 2)
    await next.client.end()
  })

  test('one that says goodbye before JavaScript hears of it leaves the connection on the shelf, its TLS connection closed', async () => {
    const { client, ends, pid } = await lentAfterAnother()
    // Those before it were taken in when the console settled (idleAgain).
    const quiet = logged('logins lent in C left before JavaScript heard of them')
    expect((await client.query('SELECT 6 AS v')).rows).toEqual([{ v: 6 }])
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    lending.proxy.nativeSessionCount()
    expect(logged('logins lent in C left before JavaScript heard of them')).toBe(quiet + 1)
    const next = await connected(lending.proxy)
    expect(next.pid).toBe(pid)
    await next.client.end()
  })

  test('one that holds the connection while another client waits is served by a session through its TLS channel, then gives the connection over', async () => {
    const holder = await lentAfterAnother()
    const waiting = connected(lending.proxy, 'waiting')
    await vi.waitFor(() => expect(lending.proxy.connectionCount()).toBe(2))
    // The pool heard of the lease: the holder's session, made in JavaScript, goes on inside TLS.
    await vi.waitFor(() => expect(lent().length).toBeGreaterThan(0))
    expect((await holder.client.query('SELECT 7 AS v')).rows).toEqual([{ v: 7 }])
    await holder.client.end()
    const served = await waiting
    expect(served.pid).toBe(holder.pid)
    expect((await served.client.query('SHOW application_name')).rows).toEqual([
      { application_name: 'waiting' },
    ])
    await served.client.end()
  })
})

describe('a transaction pool lends a login inside TLS a connection in C', () => {
  const lending = lendingInsideTls('transaction')
  const { lent, lentAfterAnother } = lending

  test('its transactions run on the lent connection before and after JavaScript hears of it; the next like it is lent it again', async () => {
    const before = lent().length
    const { client, ends, pid } = await lentAfterAnother()
    const inTransaction = async (v: number) => {
      await client.query('BEGIN')
      const { rows } = await client.query('SELECT $1::int AS v', [v])
      await client.query('COMMIT')
      return rows
    }
    expect(await inTransaction(1)).toEqual([{ v: 1 }])
    expect(lent()).toHaveLength(before + 1)
    expect(await inTransaction(2)).toEqual([{ v: 2 }])
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await lending.idleAgain()
    const next = await connected(lending.proxy)
    expect(next.pid).toBe(pid)
    expect(lent()).toHaveLength(before + 2)
    await next.client.end()
  })

  test('one that holds the connection gives it to a client that waits, and goes on in JavaScript inside TLS', async () => {
    const holder = await lentAfterAnother()
    const other = await connected(lending.proxy, 'other')
    expect(other.pid).toBe(holder.pid)
    const applicationName = async (client: pg.Client) =>
      (await client.query('SHOW application_name')).rows[0].application_name
    for (let i = 0; i < 3; i++) {
      expect(await applicationName(holder.client)).toBe('inside-tls')
      expect(await applicationName(other.client)).toBe('other')
    }
    await other.client.end()
    await holder.client.end()
    await vi.waitFor(() => expect(lending.proxy.connectionCount()).toBe(0))
  })
})
