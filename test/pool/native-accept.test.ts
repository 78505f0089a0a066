import { spawn } from 'node:child_process'
import net from 'node:net'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { once } from 'node:events'
import { Writable } from 'node:stream'
import pg from 'pg'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest'
import { stringify } from 'yaml'
import { Backend } from '../../src/wire/protocol.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { backendMessages, errorCode, sslRequest, startupMessage } from '../e2e/support/wire.js'
import { waitFor } from '../e2e/support/wait.js'

/**
 * A pooling proxy with the native relay accepts TCP clients in C (src/native/client-accept.c):
 * each connection's login starts there at once, and JavaScript hears of the connection only when
 * its login ends. What JavaScript did at accepting (the startup timeout, counting connections
 * against maxClientConnections, closing logins under way at a shutdown) holds for them.
 */

let db: TestDatabase
const userlist = writeUserlist()

beforeAll(async () => {
  db = await createTestDatabase('native_accept')
})

afterAll(async () => {
  await db?.drop()
})

/** A proxy whose log lines are kept, with the native relay, pooling and auth.file. */
async function proxyLogging(
  limits: ConfigOverrides['limits'],
  level = 'info',
  more: ConfigOverrides = {},
): Promise<{ proxy: TestProxy; lines: Record<string, unknown>[] }> {
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(line: Buffer, _encoding, done) {
      lines.push(JSON.parse(line.toString()) as Record<string, unknown>)
      done()
    },
  })
  const proxy = await startTestProxy(
    {
      pool: { mode: 'session', size: 2 },
      auth: { file: userlist },
      relay: 'native',
      limits,
      ...more,
    },
    undefined,
    { logger: pino({ level }, sink) },
  )
  return { proxy, lines }
}

async function connected(proxy: TestProxy): Promise<net.Socket> {
  const socket = net.connect(proxy.port, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  return socket
}

/**
 * A client that has sent the first bytes of its startup packet and stalls: the kernel hands a
 * listener only connections that have sent something (TCP_DEFER_ACCEPT).
 */
async function stalled(proxy: TestProxy): Promise<net.Socket> {
  const socket = await connected(proxy)
  socket.write(startupMessage('postgres', db.name).subarray(0, 4))
  return socket
}

/** The first message the proxy answers a StartupMessage with. */
async function firstAnswer(socket: net.Socket, database = db.name): Promise<string> {
  socket.write(startupMessage('postgres', database))
  const [chunk] = (await once(socket, 'data')) as [Buffer]
  const [message] = backendMessages(chunk)
  return message!.type === 'E' ? errorCode(message!)! : message!.type
}

const loginOnce = async (proxy: TestProxy, password = POOL_PASSWORD) => {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, password) })
  await client.connect()
  return client
}

const closedByProxy = (socket: net.Socket) =>
  socket.closed ? Promise.resolve() : once(socket, 'close').then(() => undefined)

test('clients that leave during their login never reach JavaScript: the next one told is connection 1', async () => {
  const { proxy, lines } = await proxyLogging({})
  try {
    for (let i = 0; i < 3; i++) {
      const socket = await connected(proxy)
      socket.write(sslRequest())
      await once(socket, 'data')
      // Under way in C, and counted.
      expect(proxy.connectionCount()).toBe(1)
      socket.destroy()
      await waitFor(() => proxy.connectionCount() === 0, { what: 'the login to end' })
    }
    await expect(loginOnce(proxy, 'wrong')).rejects.toMatchObject({ code: '28P01' })
    expect(lines.filter((line) => 'conn' in line)).toEqual([
      expect.objectContaining({ msg: 'connection refused', code: '28P01', conn: 1 }),
    ])
  } finally {
    await proxy.close()
  }
})

test('a client that has sent nothing is not accepted until its first bytes arrive', async () => {
  const { proxy } = await proxyLogging({})
  const silent = await connected(proxy)
  try {
    // Connected first: accepted at once, it would be a connection before the login behind it.
    const client = await loginOnce(proxy)
    expect(proxy.connectionCount()).toBe(1)
    await client.end()
    silent.write(sslRequest())
    const [answer] = (await once(silent, 'data')) as [Buffer]
    expect(answer.toString()).toBe('N')
  } finally {
    silent.destroy()
    await proxy.close()
  }
})

test('a login under way in C is a client connection in startup, in metrics and SHOW STATS', async () => {
  const { proxy } = await proxyLogging({}, 'info', {
    admin: { listen: { port: 0 }, users: ['postgres'] },
  })
  const waiting = await stalled(proxy)
  try {
    await waitFor(() => proxy.connectionCount() === 1, { what: 'the login to start' })
    const body = await (await fetch(`http://127.0.0.1:${proxy.adminPort}/metrics`)).text()
    expect(body).toContain('pgfence_client_connections{state="startup"} 1\n')
    const console = new pg.Client({
      connectionString: proxy.url('postgres', 'pgfence', POOL_PASSWORD),
    })
    await console.connect()
    const { rows } = await console.query('SHOW STATS')
    await console.end()
    // The console's own connection and the login under way.
    expect(rows[0]).toMatchObject({ client_connections: '2' })
  } finally {
    waiting.destroy()
    await proxy.close()
  }
})

test('a login under way in C past startupTimeoutMs is closed, and logged once at info', async () => {
  const { proxy, lines } = await proxyLogging({ startupTimeoutMs: 300 })
  try {
    const silent = await stalled(proxy)
    const port = silent.localPort
    await closedByProxy(silent)
    expect(lines.filter((line) => line.msg === 'startup not completed in time')).toEqual([
      expect.objectContaining({
        level: 30,
        conn: 1,
        peer: `127.0.0.1:${port}`,
      }),
    ])
    expect(proxy.connectionCount()).toBe(0)
  } finally {
    await proxy.close()
  }
})

test('a login C hands to JavaScript keeps what is left of its startup timeout', async () => {
  const { proxy, lines } = await proxyLogging({ startupTimeoutMs: 400 })
  try {
    const socket = await connected(proxy)
    // The console's logins are JavaScript's: it asks for a password, which never comes.
    expect(await firstAnswer(socket, 'pgfence')).toBe(String.fromCharCode(Backend.Authentication))
    await closedByProxy(socket)
    expect(lines.filter((line) => line.msg === 'startup not completed in time')).toHaveLength(1)
  } finally {
    await proxy.close()
  }
})

describe('counted against maxClientConnections while under way in C', () => {
  let proxy: TestProxy

  beforeAll(async () => {
    ;({ proxy } = await proxyLogging({ maxClientConnections: 2 }))
  })

  afterAll(async () => {
    await proxy?.close()
  })

  test('two logins under way: a third client, of a user C remembers, is refused 53300', async () => {
    // C now remembers the user's verifier: only the count can make it ask JavaScript.
    await (await loginOnce(proxy)).end()
    const waiting = [await stalled(proxy), await stalled(proxy)]
    const extra = await connected(proxy)
    try {
      expect(await firstAnswer(extra)).toBe('53300')
    } finally {
      for (const socket of [extra, ...waiting]) socket.destroy()
    }
    await waitFor(() => proxy.connectionCount() === 0, { what: 'the logins to end' })
    const client = await loginOnce(proxy)
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await client.end()
  })
})

test('a shutdown closes the logins under way in C', async () => {
  const { proxy } = await proxyLogging({ startupTimeoutMs: 60_000, shutdownTimeoutMs: 100 })
  const waiting = await stalled(proxy)
  await waitFor(() => proxy.connectionCount() === 1, { what: 'the login to start' })
  await proxy.close()
  await closedByProxy(waiting)
  expect(proxy.connectionCount()).toBe(0)
})

/** utime + stime of a process so far, in seconds (clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

test('out of descriptors, accepting pauses instead of spinning, and resumes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-accept-'))
  const url = new URL(db.url)
  const configFile = join(dir, 'pgfence.yaml')
  writeFileSync(
    configFile,
    stringify({
      listen: { host: '127.0.0.1', port: 0 },
      upstream: { host: url.hostname, port: Number(url.port), tls: 'disable' },
      pool: { mode: 'session', size: 2 },
      auth: { file: userlist },
      log: { level: 'info' },
    }),
  )
  // Enough descriptors to start and serve, too few for the flood below.
  const child = spawn(
    'bash',
    [
      '-c',
      'ulimit -n 160 && exec "$0" "$@"',
      process.execPath,
      inject('cliPath'),
      'start',
      '--config',
      configFile,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  const flood: net.Socket[] = []
  try {
    const port = await new Promise<number>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const entry = JSON.parse(line) as { msg: string; port?: number }
        if (entry.msg === 'pgfence listening' && entry.port) resolve(entry.port)
      })
      child.once('exit', () => reject(new Error('pgfence start exited before listening')))
    })
    for (let i = 0; i < 250; i++) {
      const socket = net.connect(port, '127.0.0.1')
      socket.on('error', () => {})
      flood.push(socket)
    }
    await Promise.all(flood.map((socket) => once(socket, 'connect')))
    // The backlog holds connections it cannot accept: a loop retrying them would spin.
    const before = cpuSeconds(child.pid!)
    await new Promise((resolve) => setTimeout(resolve, 1000))
    expect(cpuSeconds(child.pid!) - before).toBeLessThan(0.3)
    for (const socket of flood.splice(0)) socket.destroy()
    const through = new URL(proxyUrl(port))
    const client = new pg.Client({ connectionString: through.toString() })
    await client.connect()
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await client.end()
  } finally {
    for (const socket of flood) socket.destroy()
    child.kill('SIGTERM')
    await once(child, 'exit')
    rmSync(dir, { recursive: true, force: true })
  }
})

/** A URL for the pooled user through a proxy on `port`. */
function proxyUrl(port: number): string {
  return `postgres://postgres:${POOL_PASSWORD}@127.0.0.1:${port}/${db.name}`
}
