import net from 'node:net'
import { once } from 'node:events'
import { serialize } from 'pg-protocol'
import { afterEach, describe, expect, test } from 'vitest'
import { ClientConnection } from '../../src/client/client-connection.js'
import { defaultConfig } from '../../src/config/load.js'
import { createLogger } from '../../src/log.js'
import { Pool } from '../../src/pool/pool.js'
import { ServerConnection } from '../../src/pool/server-connection.js'
import { nextPhase, type TransactionPhase } from '../../src/session/transaction-phase.js'
import { TransactionSession } from '../../src/session/transaction-session.js'
import { UpstreamNode } from '../../src/upstream/upstream-node.js'
import { backendMessages, type BackendMessage } from '../e2e/support/wire.js'

// The server's side of the protocol, written here so the fake server depends on nothing it tests.
const backend = (type: string, body: Buffer): Buffer => {
  const head = Buffer.alloc(5)
  head.write(type, 0, 'latin1')
  head.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([head, body])
}
const cstring = (text: string) => Buffer.from(`${text}\0`, 'utf8')
const authenticationOk = () => backend('R', Buffer.alloc(4))
const backendKeyData = () => backend('K', Buffer.from([0, 0, 0, 42, 0, 0, 0, 7]))
const readyForQuery = (status: string) => backend('Z', Buffer.from(status, 'latin1'))
const commandComplete = (tag: string) => backend('C', cstring(tag))
const errorResponse = (code: string, text: string) =>
  backend(
    'E',
    Buffer.concat([cstring('SERROR'), cstring(`C${code}`), cstring(`M${text}`), cstring('')]),
  )

/** One connection to the fake server: what it was sent, in order ("Q:text", "S", "startup"). */
interface FakeBackend {
  socket: net.Socket
  received: string[]
}

/**
 * A PostgreSQL stand-in that plays the server's messages for a few statements (BEGIN, COMMIT,
 * ROLLBACK, DISCARD ALL, a failing SELECT), keeps the transaction status as PostgreSQL does, and
 * writes each reply one byte at a time, so that the session frames messages split across reads.
 */
class FakeServer {
  readonly backends: FakeBackend[] = []
  private readonly server = net.createServer((socket) => this.accept(socket))

  async listen(): Promise<number> {
    this.server.listen(0, '127.0.0.1')
    await once(this.server, 'listening')
    return (this.server.address() as net.AddressInfo).port
  }

  close(): void {
    for (const { socket } of this.backends) socket.destroy()
    this.server.close()
  }

  private accept(socket: net.Socket): void {
    socket.setNoDelay(true)
    socket.on('error', () => {})
    const fake: FakeBackend = { socket, received: [] }
    this.backends.push(fake)
    let status = 'I'
    let pending = Buffer.alloc(0)
    let started = false
    let writing = Promise.resolve()
    const reply = (...messages: Buffer[]) => {
      const bytes = Buffer.concat(messages)
      writing = writing.then(async () => {
        for (const byte of bytes) {
          if (socket.destroyed) return
          socket.write(Buffer.of(byte))
          await new Promise((resolve) => setImmediate(resolve))
        }
      })
    }
    const answer = (text: string): Buffer[] => {
      if (text === 'BEGIN') return ((status = 'T'), [commandComplete('BEGIN')])
      if (text === 'COMMIT' || text === 'ROLLBACK') {
        const tag = status === 'E' ? 'ROLLBACK' : text
        return ((status = 'I'), [commandComplete(tag)])
      }
      if (status === 'E') return [errorResponse('25P02', 'current transaction is aborted')]
      if (text === 'DISCARD ALL') {
        if (status === 'T') return [errorResponse('25001', 'DISCARD ALL cannot run in a block')]
        return [commandComplete('DISCARD ALL')]
      }
      if (text.startsWith('SELECT fail')) {
        if (status === 'T') status = 'E'
        return [errorResponse('42703', 'column "fail" does not exist')]
      }
      return [commandComplete('SELECT 0')]
    }
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk])
      for (;;) {
        if (!started) {
          if (pending.length < 4 || pending.length < pending.readInt32BE(0)) return
          pending = pending.subarray(pending.readInt32BE(0))
          started = true
          fake.received.push('startup')
          reply(authenticationOk(), backendKeyData(), readyForQuery('I'))
          continue
        }
        if (pending.length < 5 || pending.length < pending.readInt32BE(1) + 1) return
        const type = String.fromCharCode(pending[0]!)
        const body = pending.subarray(5, pending.readInt32BE(1) + 1)
        pending = pending.subarray(body.length + 5)
        if (type === 'Q') {
          const text = body.toString('utf8', 0, body.length - 1)
          fake.received.push(`Q:${text}`)
          reply(...answer(text), readyForQuery(status))
        } else {
          fake.received.push(type)
          reply(...(type === 'S' ? [readyForQuery(status)] : extended(type)))
        }
      }
    })
  }
}

/** The server's answer to a message of the extended protocol (empty: none, or Sync's). */
const extended = (type: string): Buffer[] => {
  if (type === 'P') return [backend('1', Buffer.alloc(0))]
  if (type === 'B') return [backend('2', Buffer.alloc(0))]
  if (type === 'C') return [backend('3', Buffer.alloc(0))]
  if (type === 'E') return [commandComplete('SELECT 0')]
  return []
}

/** The test's client, already logged in: it sends raw messages and reads raw replies. */
class FakeClient {
  private received = Buffer.alloc(0)
  private constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => (this.received = Buffer.concat([this.received, chunk])))
    socket.on('error', () => {})
  }

  static async connect(port: number): Promise<FakeClient> {
    const socket = net.connect({ host: '127.0.0.1', port })
    await once(socket, 'connect')
    return new FakeClient(socket)
  }

  /** Sends a simple Query and returns the messages up to its ReadyForQuery. */
  query(text: string): Promise<BackendMessage[]> {
    return this.exchange(serialize.query(text), text)
  }

  /** Sends `bytes` and returns the messages up to the next ReadyForQuery. */
  async exchange(bytes: Buffer, text: string): Promise<BackendMessage[]> {
    this.socket.write(bytes)
    let messages: BackendMessage[] = []
    await until(() => {
      messages = backendMessages(this.received)
      return messages.some((message) => message.type === 'Z')
    }, `the reply to ${text}`)
    const end = messages.findIndex((message) => message.type === 'Z')
    const taken = messages.slice(0, end + 1)
    this.received = this.received.subarray(taken.reduce((n, m) => n + 5 + m.body.length, 0))
    return taken
  }
}

/** Polls `condition` until it holds; fails after a bound generous for a loaded machine. */
async function until(condition: () => boolean, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

const types = (messages: BackendMessage[]) => messages.map((message) => message.type).join('')
const statusOf = (messages: BackendMessage[]) => messages.at(-1)!.body.toString('latin1')

interface Harness {
  fake: FakeServer
  pool: Pool
  /** The server connections the pool opened, in order. */
  servers: ServerConnection[]
  session: TransactionSession
  client: FakeClient
}

const cleanups: (() => void)[] = []
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup()
})

/**
 * A session of a pool (of one connection unless `size`) to the fake server, with a client that
 * has logged in; relayed in JavaScript unless `nativeRelay`.
 */
async function harness({ nativeRelay = false, size = 1 } = {}): Promise<Harness> {
  const fake = new FakeServer()
  const port = await fake.listen()
  const config = defaultConfig()
  const node = new UpstreamNode(
    { ...config.upstream, host: '127.0.0.1', port, tls: 'disable' },
    true,
  )
  const logger = createLogger('silent')
  const poolConfig = { ...config.pool, mode: 'transaction' as const, size }
  const servers: ServerConnection[] = []
  const open = async (credentials: object) => {
    const server = await ServerConnection.open(
      node,
      config.tcpKeepalive,
      'app',
      'appdb',
      credentials,
    )
    servers.push(server)
    return server
  }
  const pool = new Pool(() => poolConfig, open, logger, { waited() {}, timedOut() {} })
  pool.useCredentials({ password: 'unused' })
  let session: TransactionSession | null = null
  const listener = net.createServer((socket) => {
    session = new TransactionSession(ClientConnection.fromDataEvents(socket), {
      pool,
      live: { current: { rewriter: null, queryCache: null, config, nameChecks: null } },
      logger,
      trackedSettings: () => ['application_name'],
      settings: [],
      resetTimeoutMs: 10_000,
      held: { server: null },
      nativeRelay,
      onRejection: () => {},
      cancelBackend: async () => {},
      commitsMayWait: async () => false,
    })
    session.start(Buffer.alloc(0))
  })
  listener.listen(0, '127.0.0.1')
  await once(listener, 'listening')
  const client = await FakeClient.connect((listener.address() as net.AddressInfo).port)
  await until(() => session !== null, 'the session')
  cleanups.push(() => {
    client.socket.destroy()
    listener.close()
    pool.close()
    fake.close()
  })
  return { fake, pool, servers, session: session!, client }
}

const phaseOf = (session: TransactionSession): TransactionPhase => session.phase

describe('transaction session phases, against a fake server', () => {
  test('login, idle, in a transaction, released, then the same connection reused', async () => {
    const { fake, pool, session, client } = await harness()
    expect(phaseOf(session)).toBe('idle')
    expect(fake.backends).toHaveLength(0)

    // The first statement takes a connection: the pool logs in to the server for it.
    const begun = await client.query('BEGIN')
    expect(types(begun)).toBe('CZ')
    expect(statusOf(begun)).toBe('T')
    expect(phaseOf(session)).toBe('active')
    expect(fake.backends.map((backend) => backend.received)).toEqual([['startup', 'Q:BEGIN']])
    expect(pool.stats()).toMatchObject({ active: 1, idle: 0 })

    await client.query('SELECT 1')
    expect(phaseOf(session)).toBe('active')

    const committed = await client.query('COMMIT')
    expect(statusOf(committed)).toBe('I')
    await until(() => phaseOf(session) === 'idle', 'the release')
    expect(pool.stats()).toMatchObject({ active: 0, idle: 1 })

    // The next transaction takes the idle connection again: no second login.
    const next = await client.query('SELECT 2')
    expect(statusOf(next)).toBe('I')
    await until(() => phaseOf(session) === 'idle', 'the second release')
    expect(fake.backends).toHaveLength(1)
    expect(fake.backends[0]!.received).toEqual([
      'startup',
      'Q:BEGIN',
      'Q:SELECT 1',
      'Q:COMMIT',
      'Q:SELECT 2',
    ])
  })

  test('a server error mid-transaction keeps the connection until the transaction ends', async () => {
    const { pool, session, client } = await harness()
    await client.query('BEGIN')
    const failed = await client.query('SELECT fail')
    expect(types(failed)).toBe('EZ')
    expect(statusOf(failed)).toBe('E')
    // A failed transaction is still a transaction: the client keeps its connection.
    expect(phaseOf(session)).toBe('active')
    expect(pool.stats()).toMatchObject({ active: 1, idle: 0 })

    const rolledBack = await client.query('ROLLBACK')
    expect(statusOf(rolledBack)).toBe('I')
    await until(() => phaseOf(session) === 'idle', 'the release')
    expect(pool.stats()).toMatchObject({ active: 0, idle: 1 })
  })

  test('the server closing mid-transaction ends the session with 08006', async () => {
    const { fake, session, client } = await harness()
    await client.query('BEGIN')
    client.socket.write(serialize.query('SELECT 1'))
    await until(() => fake.backends[0]!.received.includes('Q:SELECT 1'), 'the statement')
    fake.backends[0]!.socket.destroy()
    await session.closed
    expect(phaseOf(session)).toBe('closed')
    await once(client.socket, 'close')
  })

  test('a client that leaves mid-transaction: the server rolls back and is reused', async () => {
    const { fake, pool, session, client } = await harness()
    await client.query('BEGIN')
    client.socket.destroy()
    await session.closed
    expect(phaseOf(session)).toBe('closed')
    // The reset finds the transaction open, rolls it back, then discards the session state.
    await until(() => pool.stats().idle === 1, 'the connection back in the pool')
    expect(fake.backends[0]!.received).toEqual([
      'startup',
      'Q:BEGIN',
      'S',
      'Q:DISCARD ALL',
      'Q:ROLLBACK',
      'Q:DISCARD ALL',
    ])
  })

  test('a client that leaves between transactions gives its kept connection back unreset', async () => {
    const { fake, pool, session, client } = await harness({ nativeRelay: true, size: 2 })
    const selected = await client.query('SELECT 1')
    expect(statusOf(selected)).toBe('I')
    // A connection to spare: the client keeps its own between transactions (lazy release).
    expect(phaseOf(session)).toBe('active')
    client.socket.end(serialize.end())
    await session.closed
    // As at the end of a transaction: nothing of the client's is left to discard.
    expect(pool.stats()).toMatchObject({ active: 0, idle: 1 })
    expect(fake.backends[0]!.received).toEqual(['startup', 'Q:SELECT 1'])
  })

  test('a SET is read back from the connection before it goes back (settling)', async () => {
    const { fake, pool, session, client } = await harness()
    const set = await client.query("SET application_name = 'reporting'")
    expect(statusOf(set)).toBe('I')
    await until(() => phaseOf(session) === 'idle', 'the settings read back')
    expect(pool.stats()).toMatchObject({ active: 0, idle: 1 })
    const readBack = fake.backends[0]!.received.at(-1)!
    expect(readBack).toMatch(
      /^Q:SELECT pg_catalog\.current_setting\('application_name', true\); RESET ALL$/,
    )
  })

  test('a named statement is prepared again on a connection that lacks it', async () => {
    const { fake, servers, session, client } = await harness()
    const bind = Buffer.concat([
      serialize.bind({ statement: 's1' }),
      serialize.execute({}),
      serialize.sync(),
    ])
    const first = await client.exchange(
      Buffer.concat([serialize.parse({ name: 's1', text: 'SELECT 1', types: [] }), bind]),
      'Parse, Bind, Execute, Sync',
    )
    expect(types(first)).toBe('12CZ')
    await until(() => phaseOf(session) === 'idle', 'the release')

    // The idle connection dies: the next transaction gets a new one, without s1.
    fake.backends[0]!.socket.destroy()
    await until(() => !servers[0]!.alive, 'the dead connection')
    const second = await client.exchange(bind, 'Bind, Execute, Sync')
    // pgfence's own Parse went first; its ParseComplete is not the client's.
    expect(types(second)).toBe('2CZ')
    expect(fake.backends).toHaveLength(2)
    expect(fake.backends[1]!.received).toEqual(['startup', 'P', 'B', 'E', 'S'])
  })

  test('an illegal transition is refused', () => {
    expect(nextPhase('idle', 'waiting')).toBe('waiting')
    expect(nextPhase('active', 'settling')).toBe('settling')
    expect(() => nextPhase('closed', 'active')).toThrow('no move from closed to active')
    expect(() => nextPhase('idle', 'settling')).toThrow('no move from idle to settling')
    expect(() => nextPhase('waiting', 'idle')).toThrow('no move from waiting to idle')
  })
})
