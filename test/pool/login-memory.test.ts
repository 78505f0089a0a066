import net from 'node:net'
import { once } from 'node:events'
import { createHash } from 'node:crypto'
import pg from 'pg'
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import { NativeLogins } from '../../src/auth/native-login.js'
import { SASL_OFFER } from '../../src/auth/client-authenticator.js'
import { deriveKeys, type ScramVerifier } from '../../src/auth/scram.js'
import { ANSWER_NO } from '../../src/client/startup-handshake.js'
import { saslInitialResponse, startupMessage } from '../../src/wire/messages.js'
import { decodeStartupPacket } from '../../src/wire/startup-packet.js'
import { Backend } from '../../src/wire/protocol.js'
import { listenForHandles, type HandleServer } from '../support/handle-server.js'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { backendMessages, errorCode, sslRequest } from '../e2e/support/wire.js'

/**
 * The login in C remembers what JavaScript chose for a user (its verifier) and for an
 * encryption request (the one-byte answer), and answers the next such packet alike without
 * asking (src/native/login-memory.c); anything it does not read as a plain login it still asks
 * about, and the proxy holds the memory while it refuses logins (client-accept.c counts the
 * logins under way against the room JavaScript gives) and clears it at a reload.
 */

/** A verifier whose salt names its user: server-first shows which verifier C checks against. */
function verifierFor(user: string): ScramVerifier {
  const salt = Buffer.from(`salt-of-${user}`)
  const { clientKey, serverKey } = deriveKeys('pencil', salt, 4096)
  return {
    iterations: 4096,
    salt,
    storedKey: createHash('sha256').update(clientKey).digest(),
    serverKey,
  }
}

const alice = verifierFor('alice')
const bob = verifierFor('bob')

let server: HandleServer
let logins: NativeLogins
/** The packets JavaScript was asked about since the last test began, as their kinds and users. */
let asked: string[] = []

beforeAll(async () => {
  logins = new NativeLogins(
    SASL_OFFER,
    (packet) => {
      let decoded
      try {
        decoded = decodeStartupPacket(packet)
      } catch {
        asked.push('unreadable')
        return null
      }
      if (decoded.kind !== 'startup') {
        asked.push(decoded.kind)
        return decoded.kind === 'ssl' ? ANSWER_NO : null
      }
      const user = decoded.params.get('user')!
      asked.push(user)
      return user === 'alice' ? alice : user === 'bob' ? bob : null
    },
    'pgfence',
  )
  server = await listenForHandles()
})

beforeEach(() => {
  logins.remember(false)
  logins.remember(true)
  asked = []
})

afterAll(() => server?.close())

/**
 * Sends `packets` one at a time on a new connection, then a client-first if the login got as
 * far as the SASL offer; returns the first byte of each answer ('fallback' when the login went
 * to JavaScript) and the salt server-first named.
 */
async function login(packets: Buffer[]): Promise<{ answers: string[]; salt?: string }> {
  const socket = net.connect(server.port, '127.0.0.1')
  socket.on('error', () => {})
  const serverSide = await server.next()
  const ended = logins.login(serverSide).then(() => 'fallback')
  const reply = async () => {
    const [chunk] = (await once(socket, 'data')) as [Buffer]
    return chunk
  }
  const answers: string[] = []
  let salt: string | undefined
  try {
    for (const packet of packets) {
      socket.write(packet)
      const answer = await Promise.race([reply(), ended])
      if (typeof answer === 'string') return { answers: [...answers, answer] }
      answers.push(String.fromCharCode(answer[0]!))
    }
    if (answers.at(-1) === String.fromCharCode(Backend.Authentication)) {
      socket.write(saslInitialResponse('SCRAM-SHA-256', 'n,,n=,r=client'))
      const serverFirst = (await reply()).toString('latin1', 9)
      salt = Buffer.from(/,s=([^,]*)/.exec(serverFirst)![1]!, 'base64').toString()
    }
    return { answers, salt }
  } finally {
    socket.destroy()
    serverSide.destroy()
  }
}

const plain = (params: [string, string][]) => startupMessage(params)

/** `packet` with its protocol's minor version set. */
function minor(packet: Buffer, version: number): Buffer {
  packet.writeUInt16BE(version, 6)
  return packet
}
const OFFER = String.fromCharCode(Backend.Authentication)

describe('what the login in C remembers', () => {
  test('a user’s verifier: JavaScript is asked at the first login only', async () => {
    const packet = plain([
      ['user', 'alice'],
      ['database', 'db'],
    ])
    expect(await login([packet])).toEqual({ answers: [OFFER], salt: 'salt-of-alice' })
    expect(await login([packet])).toEqual({ answers: [OFFER], salt: 'salt-of-alice' })
    expect(await login([plain([['user', 'alice']])])).toMatchObject({ salt: 'salt-of-alice' })
    expect(asked).toEqual(['alice'])
  })

  test('each user’s own, and the last of a repeated user counts, as in JavaScript', async () => {
    await login([plain([['user', 'alice']])])
    await login([plain([['user', 'bob']])])
    const twice = plain([
      ['user', 'alice'],
      ['user', 'bob'],
    ])
    expect(await login([twice])).toMatchObject({ salt: 'salt-of-bob' })
    expect(asked).toEqual(['alice', 'bob'])
  })

  test('the answer to an SSLRequest', async () => {
    const packets = [sslRequest(), plain([['user', 'alice']])]
    expect((await login(packets)).answers).toEqual(['N', OFFER])
    expect((await login(packets)).answers).toEqual(['N', OFFER])
    expect(asked).toEqual(['ssl', 'alice'])
  })

  test('no choice that sends the login to JavaScript', async () => {
    const carol = plain([['user', 'carol']])
    expect((await login([carol])).answers).toEqual(['fallback'])
    expect((await login([carol])).answers).toEqual(['fallback'])
    expect(asked).toEqual(['carol', 'carol'])
  })

  test.each([
    [
      'the console’s database',
      plain([
        ['user', 'alice'],
        ['database', 'pgfence'],
      ]),
    ],
    [
      'a replication connection',
      plain([
        ['user', 'alice'],
        ['replication', 'true'],
      ]),
    ],
    ['protocol 3.1', minor(plain([['user', 'alice']]), 1)],
  ])('nothing for %s: JavaScript is asked every time', async (_, packet) => {
    await login([plain([['user', 'alice']])])
    await login([packet])
    await login([packet])
    expect(asked).toHaveLength(3)
  })

  test('a packet it cannot read goes to JavaScript, whoever it names', async () => {
    await login([plain([['user', 'alice']])])
    // The last value is not terminated.
    const broken = plain([['user', 'alice']]).subarray(0, -2)
    broken.writeUInt32BE(broken.length)
    expect((await login([broken])).answers).toEqual(['fallback'])
    expect(asked).toEqual(['alice', 'unreadable'])
  })

  test('off, it forgets and asks about every packet; on again, it remembers anew', async () => {
    const packet = plain([['user', 'alice']])
    await login([packet])
    logins.remember(false)
    await login([packet])
    await login([packet])
    logins.remember(true)
    await login([packet])
    await login([packet])
    expect(asked).toEqual(['alice', 'alice', 'alice', 'alice'])
  })
})

describe('through a pooling proxy, a remembered user is still refused before authentication', () => {
  let db: TestDatabase
  let proxy: TestProxy

  beforeAll(async () => {
    db = await createTestDatabase('login_memory')
    proxy = await startTestProxy({
      pool: { mode: 'session', size: 2 },
      auth: { file: writeUserlist() },
      relay: 'native',
      limits: { maxClientConnections: 2 },
    })
  })

  /** The shutdown test closes it. */
  let open = true
  afterAll(async () => {
    if (open) await proxy?.close()
    await db?.drop()
  })

  /** The first message the proxy answers a StartupMessage with, on a connection of its own. */
  async function firstAnswer(socket: net.Socket): Promise<{ type: string; code?: string }> {
    socket.write(
      plain([
        ['user', 'postgres'],
        ['database', db.name],
      ]),
    )
    const [chunk] = (await once(socket, 'data')) as [Buffer]
    const [message] = backendMessages(chunk)
    return message!.type === 'E'
      ? { type: 'E', code: errorCode(message!) }
      : { type: message!.type }
  }

  async function connected(): Promise<net.Socket> {
    const socket = net.connect(proxy.port, '127.0.0.1')
    socket.on('error', () => {})
    await once(socket, 'connect')
    return socket
  }

  const loginOnce = async () => {
    const client = new pg.Client({
      connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    })
    await client.connect()
    return client
  }

  test('over maxClientConnections: 53300 in answer to the StartupMessage', async () => {
    await (await loginOnce()).end()
    const holders = [await loginOnce(), await loginOnce()]
    const extra = await connected()
    try {
      expect(await firstAnswer(extra)).toEqual({ type: 'E', code: '53300' })
    } finally {
      extra.destroy()
      await Promise.all(holders.map((client) => client.end()))
    }
    const again = await connected()
    expect(await firstAnswer(again)).toEqual({ type: OFFER })
    again.destroy()
  })

  test('once shutting down: 57P03 in answer to the StartupMessage', async () => {
    await (await loginOnce()).end()
    const holder = await loginOnce()
    // Told 57P01 once its transaction ends during the shutdown.
    holder.on('error', () => undefined)
    await holder.query('BEGIN')
    const late = await connected()
    late.write(sslRequest())
    expect((await once(late, 'data'))[0]).toEqual(ANSWER_NO)
    const closed = proxy.close()
    open = false
    try {
      expect(await firstAnswer(late)).toEqual({ type: 'E', code: '57P03' })
    } finally {
      late.destroy()
      await holder.query('COMMIT').catch(() => undefined)
      await holder.end().catch(() => undefined)
      await closed
    }
  })
})
