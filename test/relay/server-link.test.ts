// A pooled server connection kept in C between sessions (src/native/server-link.c): a relay
// stopped at a clean goodbye leaves the server's side to a link, which writes the reset, reads
// its answer, watches the idle connection and goes over to the next session's relay as it is.
import { once } from 'node:events'
import net from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { nativeRelayModule, relaySession } from '../../src/relay/native-relay.js'
import { RequestTracker } from '../../src/relay/request-progress.js'
import { ServerLink, type ServerLinkHandle } from '../../src/relay/server-link.js'
import { query, splits, typed } from '../wire/frames.js'
import { relayedSockets, type RelayedSockets } from '../support/relayed-sockets.js'

const DISCARD = query('DISCARD ALL')
const DISCARDED = typed('C', 'DISCARD ALL\0')
const STATUS = typed('S', 'application_name\0next\0')
const IDLE = typed('Z', 'I')
const RESET_TIMEOUT_MS = 5_000

/** Resolves with the first `bytes` bytes `socket` receives from now on. */
function receive(socket: net.Socket, bytes: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let received = 0
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      chunks.push(chunk)
      received += chunk.length
      if (received < bytes) return
      socket.off('data', onData).off('error', reject)
      resolve(Buffer.concat(chunks))
    }
    socket.on('data', onData).on('error', reject)
  })
}

describe('a server link', () => {
  let listener: net.Server
  const open: RelayedSockets[] = []
  const sockets: net.Socket[] = []

  beforeAll(async () => {
    expect(nativeRelayModule).not.toBeNull()
    listener = net.createServer().listen(0, '127.0.0.1')
    await once(listener, 'listening')
  })

  afterAll(async () => {
    for (const relayed of open) relayed.close()
    for (const socket of sockets) socket.destroy()
    await new Promise((resolve) => listener?.close(resolve))
  })

  /** A relayed session that ran one statement to its ReadyForQuery: idle, nothing in flight. */
  async function idleSession(): Promise<RelayedSockets> {
    const relayed = await relayedSockets(listener)
    open.push(relayed)
    const sent = receive(relayed.server, query('SELECT 1').length)
    relayed.client.write(query('SELECT 1'))
    await sent
    const answered = receive(relayed.client, typed('C', 'SELECT 1\0').length + IDLE.length)
    relayed.server.write(Buffer.concat([typed('C', 'SELECT 1\0'), IDLE]))
    await answered
    return relayed
  }

  /** The session's server side, kept as a link; `onEnd` hears of an end while it waits. */
  function keep(relayed: RelayedSockets, onEnd = () => {}): ServerLink {
    const { serverLink } = relayed.native.stop(true)
    expect(serverLink).toBeDefined()
    return new ServerLink(serverLink!, onEnd)
  }

  /** Writes the DISCARD through the link; resolves with what its reset gives. */
  const resetThrough = (link: ServerLink, timeoutMs: number) =>
    new Promise<Buffer | null>((resolve) => link.reset(DISCARD, 1, timeoutMs, resolve))

  /** Resets through the link, the server answering `answer` in `pieces`. */
  async function reset(relayed: RelayedSockets, link: ServerLink, answer: Buffer[]) {
    const written = receive(relayed.server, DISCARD.length)
    const result = resetThrough(link, RESET_TIMEOUT_MS)
    expect(await written).toEqual(DISCARD)
    for (const piece of answer) relayed.server.write(piece)
    return result
  }

  /** A new client relayed to the link's server connection. */
  async function adopt(relayed: RelayedSockets, link: ServerLink) {
    const { port } = listener.address() as net.AddressInfo
    const accepted = once(listener, 'connection') as Promise<[net.Socket]>
    const client = net.connect(port, '127.0.0.1')
    await once(client, 'connect')
    const [clientSide] = await accepted
    sockets.push(client, clientSide)
    const serverSocket = relayed.proxyServer
    let took: ServerLinkHandle | null = null
    const native = relaySession(
      clientSide,
      serverSocket,
      { maxMessageBytes: 1 << 20, interceptTypes: '' },
      {
        progress: new RequestTracker().snapshot(),
        onMessage: () => undefined,
        onServerMessage: () => undefined,
        onClose: () => {},
      },
      { serverReadsAgain: true, takeServerLink: () => (took = link.take()) },
    )
    expect(took).not.toBeNull()
    return { client, native: native! }
  }

  it('writes the reset, gives its ParameterStatus messages, and lends the connection on as it is', async () => {
    const first = await idleSession()
    const link = keep(first)
    expect(await reset(first, link, [Buffer.concat([DISCARDED, STATUS, IDLE])])).toEqual(STATUS)
    const { client, native } = await adopt(first, link)
    const sent = receive(first.server, query('SELECT 2').length)
    client.write(query('SELECT 2'))
    expect(await sent).toEqual(query('SELECT 2'))
    const answered = receive(client, IDLE.length)
    first.server.write(IDLE)
    expect(await answered).toEqual(IDLE)
    native.stop()
  })

  it('reads the answer cut at every byte', async () => {
    const answer = Buffer.concat([DISCARDED, STATUS, IDLE])
    for (const pieces of [...splits(answer)].slice(0, answer.length + 1)) {
      const relayed = await idleSession()
      const link = keep(relayed)
      const written = receive(relayed.server, DISCARD.length)
      const result = resetThrough(link, RESET_TIMEOUT_MS)
      await written
      for (const piece of pieces) {
        relayed.server.write(piece)
        // A turn of the loop, so that the link mostly reads each piece on its own (the outcome
        // is the same when two arrive together).
        await new Promise((resolve) => setImmediate(resolve))
      }
      expect(await result).toEqual(STATUS)
      link.close()
    }
  })

  it.each([
    ['an error', [typed('E', 'SERROR\0C25001\0Mno\0\0'), IDLE]],
    ['a transaction left open', [DISCARDED, typed('Z', 'T')]],
    ['another statement than DISCARD ALL', [typed('C', 'SET\0'), IDLE]],
    ['bytes after the last ReadyForQuery', [DISCARDED, IDLE, typed('N', 'SNOTICE\0\0')]],
    ['a message length out of bounds', [Buffer.from([0x43, 0, 0, 0, 2])]],
  ])('fails on %s', async (_, answer) => {
    const relayed = await idleSession()
    const link = keep(relayed)
    expect(await reset(relayed, link, [Buffer.concat(answer)])).toBeNull()
    expect(link.take()).toBeNull()
  })

  it('fails when the server closes during the reset, or never answers', async () => {
    const closing = await idleSession()
    const closed = keep(closing)
    const written = receive(closing.server, DISCARD.length)
    const result = resetThrough(closed, RESET_TIMEOUT_MS)
    await written
    closing.server.end()
    expect(await result).toBeNull()

    const silent = await idleSession()
    expect(await resetThrough(keep(silent), 50)).toBeNull()
  })

  it('reports a server that closes or speaks while the connection waits', async () => {
    for (const act of [(s: net.Socket) => s.end(), (s: net.Socket) => s.write(IDLE)]) {
      const relayed = await idleSession()
      let ended = 0
      let reported = () => {}
      const end = new Promise<void>((resolve) => (reported = resolve))
      const link = keep(relayed, () => {
        ended++
        reported()
      })
      const answer = [Buffer.concat([DISCARDED, IDLE])]
      expect(await reset(relayed, link, answer)).toEqual(Buffer.alloc(0))
      expect(ended).toBe(0)
      act(relayed.server)
      await end
      expect(ended).toBe(1)
      expect(link.take()).toBeNull()
    }
  })

  it('is not kept when the session is not idle, or was not asked to be', async () => {
    const busy = await relayedSockets(listener)
    open.push(busy)
    const sent = receive(busy.server, query('SELECT 1').length)
    busy.client.write(query('SELECT 1'))
    await sent
    expect(busy.native.stop(true).serverLink).toBeUndefined()

    const idle = await idleSession()
    expect(idle.native.stop().serverLink).toBeUndefined()
  })
})
