import net from 'node:net'
import { once } from 'node:events'
import { createHash, createHmac } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest'
import { NativeLogins, nativeLoginAvailable } from '../../src/auth/native-login.js'
import { listenForHandles, type HandleServer } from '../support/handle-server.js'
import {
  authenticateClient,
  SASL_OFFER,
  scramAnswer,
  scramAuthenticated,
  type ClientAuthentication,
} from '../../src/auth/client-authenticator.js'
import { LoginOutcome, loginFailureError } from '../../src/auth/login-codes.js'
import {
  deriveKeys,
  ScramClientExchange,
  type ScramKeys,
  type ScramVerifier,
} from '../../src/auth/scram.js'
import type { Secret } from '../../src/auth/secret.js'
import { PgError } from '../../src/wire/error-response.js'
import { MessageQueue, typedMessageLength } from '../../src/wire/message-queue.js'
import {
  query,
  saslInitialResponse,
  saslResponse,
  startupMessage,
  typedMessage,
} from '../../src/wire/messages.js'
import { Frontend, MAX_AUTH_MESSAGE } from '../../src/wire/protocol.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { descriptorsOf } from '../support/descriptors.js'
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
 * The login in C (src/native/client-login.c, scram-server.c) and JavaScript's exchange
 * (client-authenticator.ts) take the same client messages to the same outcome: the same
 * refusal, in the same words, or the same keys and answer.
 */

const USER = 'alice'
const salt = Buffer.from('c2FsdHNhbHRzYWx0c2FsdA==', 'base64')
const { clientKey, serverKey } = deriveKeys('pencil', salt, 4096)
const verifier: ScramVerifier = {
  iterations: 4096,
  salt,
  storedKey: createHash('sha256').update(clientKey).digest(),
  serverKey,
}
const secret: Secret = { kind: 'scram', verifier }

const NOTHING: Buffer = Buffer.alloc(0)
const hmac = (key: Buffer, text: string) => createHmac('sha256', key).update(text).digest()

/** The client's messages, as a script that answers server-first. */
interface Script {
  name: string
  mechanism?: string
  clientFirst: string
  /** The client's second message (default: a right client-final, with `change` applied). */
  final?: (serverFirst: string) => Buffer
  change?: (clientFinal: string) => string
}

/** client-final made right for the transcript, and the answer the server owes it. */
function rightFinal(clientFirst: string, serverFirst: string) {
  const gs2 = /^[ny],(a=[^,]*)?,/.exec(clientFirst)![0]
  const bare = clientFirst.slice(gs2.length)
  const nonce = /(?:^|,)r=([^,]*)/.exec(serverFirst)![1]
  const withoutProof = `c=${Buffer.from(gs2).toString('base64')},r=${nonce}`
  const authMessage = `${bare},${serverFirst},${withoutProof}`
  const signature = hmac(createHash('sha256').update(clientKey).digest(), authMessage)
  const proof = Buffer.from(clientKey.map((byte, i) => byte ^ signature[i]!))
  return {
    final: `${withoutProof},p=${proof.toString('base64')}`,
    serverFinal: `v=${hmac(serverKey, authMessage).toString('base64')}`,
  }
}

const scripts: Script[] = [
  { name: 'a right proof', clientFirst: 'n,,n=,r=rOprNGfwEbeRWgbNEkqO' },
  { name: 'a right proof with y and an authzid', clientFirst: 'y,a=alice,n=,r=abc' },
  { name: 'a repeated nonce (the last counts)', clientFirst: 'n,,n=,r=first,r=second' },
  { name: 'an unpadded proof', clientFirst: 'n,,n=,r=abc', change: (f) => f.replace(/=$/, '') },
  { name: 'a wrong proof', clientFirst: 'n,,n=,r=abc', change: (f) => f.replace('p=', 'p=A') },
  { name: 'another mechanism', mechanism: 'SCRAM-SHA-1', clientFirst: 'n,,n=,r=abc' },
  { name: 'a bad GS2 flag', clientFirst: 'p=tls-server-end-point,,n=,r=abc' },
  { name: 'no nonce', clientFirst: 'n,,n=' },
  { name: 'an empty nonce', clientFirst: 'n,,n=,r=' },
  { name: 'a nonce with a space', clientFirst: 'n,,n=,r=a b' },
  { name: 'a line break in client-first', clientFirst: 'n,,n=\n,r=abc' },
  {
    name: 'another channel binding',
    clientFirst: 'n,,n=,r=abc',
    change: (f) => f.replace('c=biws', 'c=eSws'),
  },
  {
    name: 'another nonce',
    clientFirst: 'n,,n=,r=abc',
    change: (f) => f.replace(',r=abc', ',r=abd'),
  },
  { name: 'a short proof', clientFirst: 'n,,n=,r=abc', change: (f) => f.replace(/p=.*/, 'p=AAAA') },
  {
    name: 'a Query for client-final',
    clientFirst: 'n,,n=,r=abc',
    final: () => typedMessage(Frontend.Query, Buffer.from('SELECT 1\0')),
  },
  {
    name: 'a length out of bounds',
    clientFirst: 'n,,n=,r=abc',
    final: () => Buffer.from([Frontend.Password, 0, 0, 0x27, 0x11]),
  },
]

/**
 * How a login ended, in terms both paths share: the refusal, or the keys pgfence logs in to
 * PostgreSQL with and whether the answer is AuthenticationSASLFinal with the signature RFC 5802
 * defines for the transcript, then AuthenticationOk (the server's nonce, and so the signature, differ from run to run).
 */
type Outcome = { code: string; message: string } | { keys: ScramKeys; signed: boolean }

const outcomeOf = (result: ClientAuthentication | PgError, serverFinal: Buffer | null): Outcome =>
  result instanceof PgError
    ? { code: result.code, message: result.message }
    : {
        keys: result.credentials.scram!(salt, 4096),
        signed: serverFinal !== null && result.answer.equals(scramAnswer(serverFinal.toString())),
      }

/** The client's messages after its startup, given the server's two SCRAM messages. */
function clientMessages(script: Script) {
  let expectedAnswer: Buffer | null = null
  return {
    initial: () => saslInitialResponse(script.mechanism ?? 'SCRAM-SHA-256', script.clientFirst),
    final: (serverFirst: string) => {
      if (script.final) return script.final(serverFirst)
      const right = rightFinal(script.clientFirst, serverFirst)
      expectedAnswer = Buffer.from(right.serverFinal)
      return saslResponse(script.change ? script.change(right.final) : right.final)
    },
    /** server-final for a right client-final, to find in the answer. */
    serverFinal: () => expectedAnswer,
  }
}

/** server-first out of an AuthenticationSASLContinue. */
const serverFirstOf = (message: Buffer) => message.toString('utf8', 9)

/** JavaScript's exchange, on messages framed as connection-login.ts frames them. */
async function inJavaScript(script: Script): Promise<Outcome> {
  const client = clientMessages(script)
  const sent: Buffer[] = []
  const queue = new MessageQueue(typedMessageLength(MAX_AUTH_MESSAGE))
  let step = 0
  const conversation = {
    send: (bytes: Buffer) => void sent.push(bytes),
    next: () => {
      queue.push(step++ === 0 ? client.initial() : client.final(serverFirstOf(sent[1]!)))
      return queue.next()
    },
  }
  const result = await authenticateClient(conversation, USER, secret).catch((err: PgError) => err)
  return outcomeOf(result, client.serverFinal())
}

let server: HandleServer
let logins: NativeLogins

beforeAll(async () => {
  logins = new NativeLogins(SASL_OFFER, () => verifier, 'pgfence')
  server = await listenForHandles()
})

afterAll(() => server?.close())

/** The login in C, on a socket. */
async function inC(script: Script): Promise<Outcome> {
  const client = clientMessages(script)
  const socket = net.connect(server.port, '127.0.0.1')
  const queue = new MessageQueue(typedMessageLength(1 << 20))
  socket.on('data', (chunk) => queue.push(chunk))
  socket.on('error', () => {})
  const serverSide = await server.next()
  const ended = logins.login(serverSide)
  socket.write(
    startupMessage([
      ['user', USER],
      ['database', 'db'],
    ]),
  )
  expect((await queue.next()).equals(SASL_OFFER)).toBe(true)
  socket.write(client.initial())
  const steps = Promise.race([queue.next(), ended])
  const second = await steps
  if (Buffer.isBuffer(second)) socket.write(client.final(serverFirstOf(second)))
  const result = await ended
  socket.destroy()
  serverSide.destroy()
  if (result.outcome === LoginOutcome.Refused)
    return outcomeOf(loginFailureError(result.failure, USER, result.detail), null)
  if (result.outcome !== LoginOutcome.Authenticated) throw new Error(`ended ${result.outcome}`)
  const authenticated = scramAuthenticated(USER, secret, result.keys, result.answer)
  return outcomeOf(authenticated, client.serverFinal())
}

/** The server's part of the nonce a login in C sends in server-first. */
async function serverNonceInC(): Promise<string> {
  const socket = net.connect(server.port, '127.0.0.1')
  const queue = new MessageQueue(typedMessageLength(1 << 20))
  socket.on('data', (chunk) => queue.push(chunk))
  const serverSide = await server.next()
  void logins.login(serverSide)
  socket.write(startupMessage([['user', USER]]))
  await queue.next()
  socket.write(saslInitialResponse('SCRAM-SHA-256', 'n,,n=,r=client'))
  const serverFirst = serverFirstOf(await queue.next())
  socket.destroy()
  serverSide.destroy()
  return /^r=client([^,]*),/.exec(serverFirst)![1]!
}

describe('the login in C beside JavaScript’s', () => {
  test('is built into the addon', () => expect(nativeLoginAvailable).toBe(true))

  test('each login gets a server nonce of its own, 18 random bytes in base64', async () => {
    const nonces: string[] = []
    for (let i = 0; i < 4; i++) nonces.push(await serverNonceInC())
    for (const nonce of nonces) expect(Buffer.from(nonce, 'base64')).toHaveLength(18)
    expect(new Set(nonces).size).toBe(nonces.length)
  })

  test.each(scripts)('$name: the same outcome', async (script) => {
    const js = await inJavaScript(script)
    expect(await inC(script)).toEqual(js)
    if ('keys' in js) {
      expect(js.keys.clientKey.equals(clientKey)).toBe(true)
      expect(js.signed).toBe(true)
    }
  })
})

describe('logins in C through the proxy (session pool, the userlist’s password)', () => {
  let db: TestDatabase
  let proxy: TestProxy

  beforeAll(async () => {
    db = await createTestDatabase('native_login')
    proxy = await startTestProxy({
      pool: { mode: 'session', size: 2 },
      auth: { file: writeUserlist() },
      relay: 'native',
      limits: { startupTimeoutMs: 500 },
    })
  })

  afterAll(async () => {
    await proxy?.close()
    await db?.drop()
  })

  const startup = () =>
    startupMessage([
      ['user', 'postgres'],
      ['database', db.name],
    ])

  /** A raw client that reads typed messages; `first` sends its startup (after any request). */
  async function rawClient() {
    const socket = await connectRaw(proxy.port)
    const queue = new MessageQueue(typedMessageLength(1 << 20))
    socket.on('data', (chunk) => queue.push(chunk))
    return { socket, next: () => queue.next() }
  }

  /** Logs in with SCRAM and the userlist's password; `withFinal` goes with client-final. */
  async function scram(client: Awaited<ReturnType<typeof rawClient>>, withFinal: Buffer = NOTHING) {
    client.socket.write(startup())
    expect((await client.next()).equals(SASL_OFFER)).toBe(true)
    const exchange = new ScramClientExchange((salt, iterations) =>
      deriveKeys(POOL_PASSWORD, salt, iterations),
    )
    client.socket.write(saslInitialResponse('SCRAM-SHA-256', exchange.first()))
    const serverFirst = serverFirstOf(await client.next())
    client.socket.write(Buffer.concat([saslResponse(exchange.final(serverFirst)), withFinal]))
    const serverFinal = await client.next()
    expect(exchange.verify(serverFinal.toString('utf8', 9))).toBe(true)
  }

  /** The types of the messages up to and including the next ReadyForQuery. */
  async function untilReady(client: Awaited<ReturnType<typeof rawClient>>): Promise<string[]> {
    const types: string[] = []
    for (;;) {
      const message = await client.next()
      types.push(String.fromCharCode(message[0]!))
      if (message[0] === 0x5a) return types
    }
  }

  test('a query sent with the last SCRAM message is answered after the greeting', async () => {
    const client = await rawClient()
    await scram(client, query('SELECT 41 + 1'))
    // AuthenticationOk, the ParameterStatus set, BackendKeyData, ReadyForQuery; then the answer.
    expect((await untilReady(client)).at(-2)).toBe('K')
    expect(await untilReady(client)).toEqual(['T', 'D', 'C', 'Z'])
    client.socket.destroy()
  })

  test('half a query sent with the last SCRAM message: JavaScript relays it, on a late socket', async () => {
    const client = await rawClient()
    const whole = query('SELECT 41 + 1')
    await scram(client, whole.subarray(0, 7))
    expect((await untilReady(client)).at(-2)).toBe('K')
    // The session could not start in the native relay mid-message: JavaScript reads the rest.
    expect(proxy.nativeSessionCount()).toBe(0)
    client.socket.write(whole.subarray(7))
    expect(await untilReady(client)).toEqual(['T', 'D', 'C', 'Z'])
    client.socket.destroy()
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
  })

  test('the login’s descriptor goes with the session, to the relay or to JavaScript', async () => {
    // Whole query after the greeting: the relay takes the login's watch over and closes it with
    // the session; half a query with the last SCRAM message: JavaScript reads through a socket
    // and closes the watch (a watch dropped unclosed would go with its value's collection).
    for (const withFinal of [NOTHING, query('SELECT 1').subarray(0, 7)]) {
      const client = await rawClient()
      const ends = { local: proxy.port, remote: client.socket.localPort! }
      await scram(client, withFinal)
      await untilReady(client)
      const closed = once(client.socket, 'close')
      client.socket.destroy()
      await closed
      await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    }
  })

  test('a client refused after it authenticated sees its connection close', async () => {
    const client = await rawClient()
    client.socket.write(
      startupMessage([
        ['user', 'postgres'],
        ['database', `${db.name}_missing`],
      ]),
    )
    expect((await client.next()).equals(SASL_OFFER)).toBe(true)
    const exchange = new ScramClientExchange((salt, iterations) =>
      deriveKeys(POOL_PASSWORD, salt, iterations),
    )
    client.socket.write(saslInitialResponse('SCRAM-SHA-256', exchange.first()))
    const serverFirst = serverFirstOf(await client.next())
    const ended = once(client.socket, 'end')
    client.socket.write(saslResponse(exchange.final(serverFirst)))
    const refusal = await client.next()
    expect(String.fromCharCode(refusal[0]!)).toBe('E')
    expect(refusal.toString('latin1')).toContain('3D000')
    await ended
    client.socket.destroy()
  })

  test('an SSLRequest is refused in C and the login goes on in plaintext', async () => {
    const socket = await connectRaw(proxy.port)
    socket.write(sslRequest())
    const [answer] = (await once(socket, 'data')) as [Buffer]
    expect(answer.toString()).toBe('N')
    const queue = new MessageQueue(typedMessageLength(1 << 20))
    socket.on('data', (chunk) => queue.push(chunk))
    const client = { socket, next: () => queue.next() }
    await scram(client)
    expect((await untilReady(client)).at(-1)).toBe('Z')
    socket.destroy()
  })

  test('bytes sent with an SSLRequest, before its answer, are refused (08P01)', async () => {
    const socket = await connectRaw(proxy.port)
    socket.write(Buffer.concat([sslRequest(), startupMessage([['user', 'postgres']])]))
    const { received } = await closedWithin(socket, 5000)
    const [error] = backendMessages(received)
    expect(error && errorCode(error)).toBe('08P01')
  })

  test('a client that leaves during the exchange, or stalls in it, is let go', async () => {
    const leaving = await rawClient()
    leaving.socket.write(startup())
    await leaving.next()
    leaving.socket.destroy()
    const stalling = await rawClient()
    stalling.socket.write(startup())
    await stalling.next()
    // limits.startupTimeoutMs is 500: the proxy closes the stalled login.
    await closedWithin(stalling.socket, 5000)
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
  })

  test('node-postgres and psql log in; a wrong password is 28P01', async () => {
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    })
    await client.connect()
    expect((await client.query('SELECT current_database() AS db')).rows[0].db).toBe(db.name)
    await client.end()
    const psql = await runCommand(pgBin('psql'), [
      '-XAtc',
      'SELECT 7',
      proxy.url('postgres', db.name, POOL_PASSWORD) + '?sslmode=prefer',
    ])
    expect(psql.stdout.trim()).toBe('7')
    const wrong = new pg.Client({ connectionString: proxy.url('postgres', db.name, 'wrong') })
    await expect(wrong.connect()).rejects.toMatchObject({
      code: '28P01',
      message: 'password authentication failed for user "postgres"',
    })
  })
})

describe('a transaction-pool client logged in by C (read through the login’s watch)', () => {
  let db: TestDatabase
  let proxy: TestProxy

  beforeAll(async () => {
    db = await createTestDatabase('native_login_tx')
    proxy = await startTestProxy({
      pool: { mode: 'transaction', size: 1 },
      auth: { file: writeUserlist() },
      relay: 'native',
    })
  })

  afterAll(async () => {
    await proxy?.close()
    await db?.drop()
  })

  let clients = 0

  /**
   * A node-postgres client through the proxy, and the ends of its connection there. Each has an
   * application_name of its own: a client like the one that left the pool's connection would be
   * lent it in C (test/pool/lent-in-c.test.ts), and read by the native relay, not the watch.
   */
  async function connected() {
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
      application_name: `watch-${++clients}`,
    })
    await client.connect()
    const stream = (client as unknown as { connection: { stream: net.Socket } }).connection.stream
    return { client, stream, ends: { local: proxy.port, remote: stream.localPort! } }
  }

  test('its bytes come through the watch, with no socket: two descriptors until it leaves', async () => {
    const { client, ends } = await connected()
    for (let i = 0; i < 3; i++)
      expect((await client.query('SELECT $1::int * 2 AS v', [i])).rows).toEqual([{ v: 2 * i }])
    // The accepted handle's and the login's duplicate; a socket would have closed the second.
    expect(descriptorsOf(ends)).toBe(2)
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
  })

  test('a client that goes without a goodbye ends its session, and the pool serves the next', async () => {
    const { client, stream, ends } = await connected()
    await client.query('SELECT 1')
    client.on('error', () => {})
    stream.destroy()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
    await vi.waitFor(() => expect(proxy.connectionCount()).toBe(0))
    const next = await connected()
    expect((await next.client.query('SELECT 5 AS v')).rows).toEqual([{ v: 5 }])
    await next.client.end()
  })

  test('an answer larger than the kernel takes goes on through a socket made then, which reads on', async () => {
    const { client, stream, ends } = await connected()
    await client.query('SELECT 1')
    stream.pause()
    const big = client.query("SELECT repeat('x', 16 * 1024 * 1024) AS v")
    // The rest of the answer waits in a socket, which took over from the watch.
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(1), { timeout: 10_000 })
    stream.resume()
    expect((await big).rows[0].v).toHaveLength(16 * 1024 * 1024)
    expect((await client.query('SELECT $1::text AS v', ['after'])).rows).toEqual([{ v: 'after' }])
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
  })

  test('a client kept on its connection is handed to the native relay and back', async () => {
    const { client, ends } = await connected()
    await client.query('SET app.fencing_token = 7')
    for (let i = 0; i < 3; i++) {
      const rows = (await client.query("SELECT current_setting('app.fencing_token') AS v")).rows
      expect(rows).toEqual([{ v: '7' }])
    }
    await client.end()
    await vi.waitFor(() => expect(descriptorsOf(ends)).toBe(0))
  })
})
