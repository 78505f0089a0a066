import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type net from 'node:net'
import pg from 'pg'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { createSelfSignedCert } from '../support/auth-cluster.js'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { waitFor } from './support/wait.js'
import {
  backendMessages,
  closedWithin,
  connectRaw,
  errorCode,
  loggedInRawSocket,
  sslRequest,
  startupMessage,
} from './support/wire.js'

const twoGiB = 0x7fffffff
/** Well under the proxy's startup timeout, so a close within it is the proxy's own decision. */
const promptly = 3000

let db: TestDatabase
let proxy: TestProxy
let workDir: string
const extraProxies: TestProxy[] = []

beforeAll(async () => {
  db = await createTestDatabase('e2e_abuse')
  proxy = await startTestProxy({ limits: { startupTimeoutMs: 30_000 } }, db.url)
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-abuse-'))
})

afterEach(async () => {
  expect(await answerThrough(proxy)).toBe(1)
})

afterAll(async () => {
  await Promise.all([proxy, ...extraProxies].map((running) => running?.close()))
  await db?.drop()
  rmSync(workDir, { recursive: true, force: true })
})

async function answerThrough(target: TestProxy): Promise<number> {
  const client = new pg.Client({ connectionString: target.url(), connectionTimeoutMillis: 5000 })
  await client.connect()
  try {
    return (await client.query('SELECT 1 AS one')).rows[0].one
  } finally {
    await client.end()
  }
}

async function extraProxy(overrides: ConfigOverrides): Promise<TestProxy> {
  const running = await startTestProxy(overrides, db.url)
  extraProxies.push(running)
  return running
}

function int32(value: number): Buffer {
  const bytes = Buffer.alloc(4)
  bytes.writeInt32BE(value)
  return bytes
}

const typedHeader = (type: string, length: number): Buffer =>
  Buffer.concat([Buffer.from(type), int32(length)])

const authenticationRequests = (bytes: Buffer) =>
  backendMessages(bytes).filter((message) => message.type === 'R')

const errorCodes = (bytes: Buffer) =>
  backendMessages(bytes)
    .filter((message) => message.type === 'E')
    .map(errorCode)

describe('hostile clients before login', () => {
  test('random garbage is closed without a login', async () => {
    const socket = await connectRaw(proxy.port)
    socket.end(randomBytes(4096))
    const { received } = await closedWithin(socket, promptly)
    expect(authenticationRequests(received)).toEqual([])
  })

  // PostgreSQL closes these without a word (the error is only logged): so does pgfence.
  test('a startup packet declaring 2 GiB is closed at once, silently', async () => {
    const socket = await connectRaw(proxy.port)
    socket.write(Buffer.concat([int32(twoGiB), int32(196608)]))
    const { received } = await closedWithin(socket, promptly)
    expect(received.length).toBe(0)
  })

  test('a startup length below 8 is closed at once, silently', async () => {
    const socket = await connectRaw(proxy.port)
    socket.write(int32(4))
    const { received } = await closedWithin(socket, promptly)
    expect(received.length).toBe(0)
  })

  test('Terminate before the StartupMessage (node-postgres end() during connect) gets no FATAL', async () => {
    const socket = await connectRaw(proxy.port)
    socket.end(Buffer.from([0x58, 0, 0, 0, 4]))
    const { received } = await closedWithin(socket, promptly)
    expect(received.length).toBe(0)
  })

  test('a truncated startup packet followed by end of stream is closed', async () => {
    const socket = await connectRaw(proxy.port)
    socket.end(startupMessage('postgres', db.name).subarray(0, 20))
    await closedWithin(socket, promptly)
  })

  test('an SSLRequest with plaintext in the same packet is refused', async () => {
    const { certFile, keyFile } = await createSelfSignedCert(workDir)
    const tlsProxy = await extraProxy({ tls: { cert: certFile, key: keyFile } })
    const socket = await connectRaw(tlsProxy.port)
    socket.write(Buffer.concat([sslRequest(), startupMessage('postgres', db.name)]))
    const { received } = await closedWithin(socket, promptly)
    // PostgreSQL's answer: no login, 08P01 "received unencrypted data after SSL request".
    const afterSslAnswer = received[0] === 'S'.charCodeAt(0) ? received.subarray(1) : received
    expect(authenticationRequests(afterSslAnswer)).toEqual([])
    expect(errorCodes(afterSslAnswer)).toEqual(['08P01'])
    expect(await answerThrough(tlsProxy)).toBe(1)
  })
})

describe('hostile clients after login', () => {
  test('a client sending one byte per write still gets its answer', async () => {
    const socket = await connectRaw(proxy.port)
    socket.setNoDelay(true)
    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    const query = 'SELECT 42 AS answer\0'
    const bytes = Buffer.concat([
      startupMessage('postgres', db.name),
      typedHeader('Q', 4 + query.length),
      Buffer.from(query),
    ])
    for (const byte of bytes) {
      await new Promise((resolve) => socket.write(Buffer.of(byte), resolve))
    }
    await waitFor(
      () =>
        backendMessages(Buffer.concat(chunks)).filter((message) => message.type === 'Z').length ===
        2,
      { what: 'the answer to the dripped query' },
    )
    const rows = backendMessages(Buffer.concat(chunks)).filter((message) => message.type === 'D')
    expect(rows.map((row) => row.body.subarray(6).toString())).toEqual(['42'])
    socket.destroy()
  })

  test('a message declaring 2 GiB is closed at once', async () => {
    const socket = await loggedInRawSocket(proxy.port, 'postgres', db.name)
    socket.write(Buffer.concat([typedHeader('Q', twoGiB), Buffer.from('SELECT 1')]))
    await closedWithin(socket, promptly)
  })

  test('an unknown message type gets 08P01 as from PostgreSQL', async () => {
    const socket = await loggedInRawSocket(proxy.port, 'postgres', db.name)
    socket.write(typedHeader('y', 4))
    const { received } = await closedWithin(socket, promptly)
    expect(errorCodes(received)).toEqual(['08P01'])
  })

  test('a truncated message followed by end of stream closes the session and its backend', async () => {
    const socket = await loggedInRawSocket(proxy.port, 'postgres', db.name)
    socket.end(Buffer.concat([typedHeader('Q', 100), Buffer.from('SELECT')]))
    await closedWithin(socket, promptly)
    await waitFor(
      async () => {
        const { rows } = await adminQuery(
          `SELECT 1 FROM pg_stat_activity WHERE datname = '${db.name}' AND application_name = 'pgfence-e2e-raw'`,
        )
        return rows.length === 0
      },
      { what: 'the backend of the closed session to exit' },
    )
  })
})

describe('crowds and limits', () => {
  async function halfOpenSockets(port: number, count: number): Promise<net.Socket[]> {
    const sockets = await Promise.all(Array.from({ length: count }, () => connectRaw(port)))
    // Each declares a startup packet and sends only its first bytes.
    for (const socket of sockets) socket.write(startupMessage('postgres', db.name).subarray(0, 6))
    return sockets
  }

  test('300 half-open sockets do not delay a normal login', async () => {
    const sockets = await halfOpenSockets(proxy.port, 300)
    try {
      const started = Date.now()
      expect(await answerThrough(proxy)).toBe(1)
      expect(Date.now() - started).toBeLessThan(2000)
    } finally {
      for (const socket of sockets) socket.destroy()
    }
  })

  test('half-open sockets are closed after startupTimeoutMs', async () => {
    const impatient = await extraProxy({ limits: { startupTimeoutMs: 500 } })
    const sockets = await halfOpenSockets(impatient.port, 300)
    await Promise.all(sockets.map((socket) => closedWithin(socket, 5000)))
    expect(await answerThrough(impatient)).toBe(1)
  })

  test('a client over maxClientConnections gets 53300, and a freed slot is reusable', async () => {
    const capped = await extraProxy({ limits: { maxClientConnections: 3 } })
    const holders = Array.from(
      { length: 3 },
      () => new pg.Client({ connectionString: capped.url() }),
    )
    await Promise.all(holders.map((client) => client.connect()))
    try {
      const extra = new pg.Client({ connectionString: capped.url() })
      await expect(extra.connect()).rejects.toMatchObject({ code: '53300' })
      await holders.pop()?.end()
      await waitFor(async () => (await answerThrough(capped).catch(() => 0)) === 1, {
        what: 'a freed connection slot',
      })
    } finally {
      await Promise.all(holders.map((client) => client.end()))
    }
  })

  test('a client that stops reading a 300 MB result holds its backend back, not the proxy', async () => {
    const socket = await loggedInRawSocket(proxy.port, 'postgres', db.name)
    socket.pause()
    const query = "SELECT repeat('x', 1000000) FROM generate_series(1, 300)\0"
    socket.write(
      Buffer.concat([typedHeader('Q', 4 + Buffer.byteLength(query)), Buffer.from(query)]),
    )
    try {
      await waitFor(
        async () => {
          const { rows } = await adminQuery(
            `SELECT 1 FROM pg_stat_activity WHERE datname = '${db.name}'
             AND application_name = 'pgfence-e2e-raw' AND wait_event = 'ClientWrite'`,
          )
          return rows.length === 1
        },
        { what: 'the backend to block writing to the proxy' },
      )
      expect(process.memoryUsage().rss).toBeLessThan(300 * 1024 * 1024)
      expect(await answerThrough(proxy)).toBe(1)
    } finally {
      socket.destroy()
    }
  })

  test('resident memory stays under 300 MB after all of the above', () => {
    expect(process.memoryUsage().rss).toBeLessThan(300 * 1024 * 1024)
  })
})
