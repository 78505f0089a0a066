// How the native relay watches its sockets on Node's event loop: many sockets ready at once, a
// side not watched while its peer is full, a connection reset, and a loop that no relay keeps
// alive once the relays have stopped.
import { spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import net from 'node:net'
import { dirname, join } from 'node:path'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { nativeRelayModule } from '../../src/relay/native-relay.js'
import { query, typed } from '../wire/frames.js'
import { relayedSockets, type RelayedSockets } from '../support/relayed-sockets.js'

/** Resolves once `socket` has received `bytes` bytes; with their SHA-256. */
function receive(socket: net.Socket, bytes: number): Promise<string> {
  const hash = createHash('sha256')
  let received = 0
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      hash.update(chunk)
      received += chunk.length
      if (received < bytes) return
      socket.off('data', onData).off('error', reject)
      resolve(hash.digest('hex'))
    }
    socket.on('data', onData).on('error', reject)
  })
}

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex')

describe("the native relay's watching of its sockets", () => {
  let listener: net.Server
  const open: RelayedSockets[] = []

  beforeAll(async () => {
    expect(nativeRelayModule).not.toBeNull()
    listener = net.createServer().listen(0, '127.0.0.1')
    await once(listener, 'listening')
  })

  afterAll(async () => {
    for (const sockets of open) sockets.close()
    await new Promise((resolve) => listener?.close(resolve))
  })

  async function relayed(
    hooks: Parameters<typeof relayedSockets>[2] = {},
    settings: Parameters<typeof relayedSockets>[1] = {},
    after: Parameters<typeof relayedSockets>[3] = {},
  ) {
    const sockets = await relayedSockets(listener, settings, hooks, after)
    open.push(sockets)
    return sockets
  }

  it('serves every session when many sockets are ready at once', async () => {
    // 150 sessions written to in one turn of the loop, their sockets ready together.
    const sessions: RelayedSockets[] = []
    while (sessions.length < 150) sessions.push(await relayed())
    const request = query('SELECT 1')
    const requests = sessions.map(({ server }) => receive(server, request.length))
    for (const { client } of sessions) client.write(request)
    expect(new Set(await Promise.all(requests))).toEqual(new Set([sha256(request)]))
    const answer = typed('Z', 'I')
    const answers = sessions.map(({ client }) => receive(client, answer.length))
    for (const { server } of sessions) server.write(answer)
    expect(new Set(await Promise.all(answers))).toEqual(new Set([sha256(answer)]))
  })

  it('stops watching a server whose client is full, and carries every byte once the client reads', async () => {
    const { client, server } = await relayed()
    // 32 MB of DataRow messages, far more than the sockets' buffers hold: the relay must hold
    // what the client has not taken, and watch neither side of the server until it has, many
    // times over while the client reads.
    const row = typed('D', Buffer.alloc(64 * 1024 - 4, 'x'))
    const rows = Buffer.concat(Array.from({ length: 512 }, () => row))
    const arrived = receive(client, rows.length)
    server.write(rows)
    expect(await arrived).toBe(sha256(rows))
  })

  it('reports a client that resets its connection as closed', async () => {
    let closed: (kind: string) => void = () => {}
    const reported = new Promise<string>((resolve) => (closed = resolve))
    const { client, server } = await relayed({ onClose: (kind) => closed(kind) })
    client.write(query('SELECT 1'))
    await receive(server, query('SELECT 1').length)
    client.resetAndDestroy()
    expect(await reported).toBe('client')
  })

  /** A relay that offers Query and Terminate, recording what it offers and how it ends. */
  async function relayedWithGoodbye(after: Parameters<typeof relayedSockets>[3]) {
    const offered: string[] = []
    let closed: (kind: string) => void = () => {}
    const ended = new Promise<string>((resolve) => (closed = resolve))
    const sockets = await relayed(
      {
        onMessage: (message) => void offered.push(String.fromCharCode(message[0]!)),
        onClose: (kind) => closed(kind),
      },
      { interceptTypes: 'QX' },
      after,
    )
    return { ...sockets, offered, ended }
  }

  const goodbye = typed('X', '')

  it("passes a client's Terminate on without offering it, and reports the close after it as a goodbye", async () => {
    const { client, server, offered, ended } = await relayedWithGoodbye({})
    const sent = Buffer.concat([query('SELECT 1'), goodbye])
    const arrived = receive(server, sent.length)
    client.end(sent)
    expect(await arrived).toBe(sha256(sent))
    expect(await ended).toBe('goodbye')
    expect(offered).toEqual(['Q'])
  })

  it("keeps a client's Terminate from a server connection that outlives the client", async () => {
    const sockets = await relayedWithGoodbye({ serverReadsAgain: true })
    const { client, server, proxyServer, offered, ended } = sockets
    const received: Buffer[] = []
    server.on('data', (chunk: Buffer) => received.push(chunk))
    const serverDone = once(server, 'end')
    client.end(Buffer.concat([query('SELECT 1'), goodbye]))
    expect(await ended).toBe('goodbye')
    // The relay has stopped: everything it passed on is in the socket before this end.
    proxyServer.end()
    await serverDone
    expect(Buffer.concat(received)).toEqual(query('SELECT 1'))
    expect(offered).toEqual(['Q'])
  })

  it('lets the process exit once its relays have stopped', async () => {
    const relayModule = join(dirname(dirname(inject('cliPath'))), 'relay', 'native-relay.js')
    const script = `
      import net from 'node:net'
      import { once } from 'node:events'
      import { relaySession } from ${JSON.stringify(relayModule)}
      const listener = net.createServer().listen(0, '127.0.0.1')
      await once(listener, 'listening')
      const pair = async () => {
        const accepted = once(listener, 'connection')
        const outer = net.connect(listener.address().port, '127.0.0.1')
        await once(outer, 'connect')
        return [outer, (await accepted)[0]]
      }
      const [client, clientSide] = await pair()
      const [serverSide, server] = await pair()
      const relay = relaySession(clientSide, serverSide, { maxMessageBytes: 1 << 20, interceptTypes: '' }, {
        onMessage() {}, onServerMessage() {}, onClose() {},
        progress: { outstanding: 0, status: 'I', mayCommit: false, namedCommit: false, unsynced: false },
      })
      client.write(Buffer.from([0x51, 0, 0, 0, 5, 0]))
      await once(server, 'data')
      relay.stop()
      for (const socket of [client, clientSide, serverSide, server]) socket.destroy()
      listener.close()
      console.log('relayed')
    `
    // A child that its relays keep alive is killed after 30 s: exit code null, the test fails.
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      timeout: 30_000,
    })
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
    const [code] = (await once(child, 'exit')) as [number]
    expect({ code, output: output.trim() }).toEqual({ code: 0, output: 'relayed' })
  })
})
