import net from 'node:net'
import { once } from 'node:events'
import { execFileSync } from 'node:child_process'
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, test } from 'vitest'
import { acceptClients, ClientConnection } from '../../src/client/client-connection.js'
import { listenForHandles, type HandleServer } from '../support/handle-server.js'

let server: net.Server
/** Takes the next client accepted. */
let onAccept: (connection: ClientConnection) => void
let port: number

beforeEach(async () => {
  server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  port = (server.address() as net.AddressInfo).port
  acceptClients(server, true, (connection) => onAccept(connection))
})

afterEach(async () => {
  server.close()
  await once(server, 'close')
})

/**
 * Connects, sends one byte, closes, and gives the memory the proxy side read it into. With
 * `hold`, the receiver keeps the chunk (as a write still queued would), then resumes the socket.
 */
async function readInto(hold: boolean): Promise<ArrayBufferLike> {
  const accepted = new Promise<ClientConnection>((resolve) => (onAccept = resolve))
  const socket = net.connect(port, '127.0.0.1')
  const connection = await accepted
  const chunk = new Promise<Buffer>((resolve) =>
    connection.setReceiver((bytes) => (resolve(bytes), !hold)),
  )
  socket.write(Buffer.from([1]))
  const memory = (await chunk).buffer
  if (hold) connection.socket.resume()
  const closed = once(connection.socket, 'close')
  socket.end()
  connection.socket.end()
  await closed
  return memory
}

test("a closed client's read buffer is the next client's", async () => {
  const first = await readInto(false)
  const second = await readInto(false)
  expect(second).toBe(first)
})

test('a buffer whose last chunk is still referenced is not lent again', async () => {
  const first = await readInto(true)
  const second = await readInto(false)
  expect(second).not.toBe(first)
})

/**
 * The same through a descriptor, as the plaintext end of a TLS channel in the addon is read: a
 * FIFO stands in for the socketpair (Node reads both through a pipe handle).
 */
async function readThroughDescriptor(): Promise<ArrayBufferLike> {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-fifo-'))
  const path = join(dir, 'fifo')
  execFileSync('mkfifo', [path])
  const fd = openSync(path, constants.O_RDWR | constants.O_NONBLOCK)
  const connection = ClientConnection.readingIntoBuffer({ fd })
  const chunk = new Promise<Buffer>((resolve) =>
    connection.setReceiver((bytes) => (resolve(bytes), true)),
  )
  const writer = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK)
  writeSync(writer, Buffer.from([1]))
  const memory = (await chunk).buffer
  closeSync(writer)
  const closed = once(connection.socket, 'close')
  connection.socket.destroy()
  await closed
  rmSync(dir, { recursive: true })
  return memory
}

test('a client on a descriptor reads into a pooled buffer, and gives it back at close', async () => {
  const first = await readThroughDescriptor()
  expect(await readThroughDescriptor()).toBe(first)
  expect(await readInto(false)).toBe(first)
})

describe('a client accepted with no socket (for a login in C)', () => {
  let handles: HandleServer

  beforeEach(async () => (handles = await listenForHandles()))
  afterEach(() => handles.close())

  /** A client and the proxy's side of it. */
  async function connect(): Promise<{ client: net.Socket; connection: ClientConnection }> {
    const client = net.connect(handles.port, '127.0.0.1')
    return { client, connection: await handles.next() }
  }

  test('writes and closes on its descriptor, and tells who listens that it closed', async () => {
    const { client, connection } = await connect()
    const received: Buffer[] = []
    client.on('data', (chunk: Buffer) => received.push(chunk))
    const clientEnded = once(client, 'end')
    const closed = new Promise<void>((resolve) => connection.onClose(resolve))
    expect(connection.descriptor()).toBeGreaterThanOrEqual(0)
    expect(connection.peer()).toBe(`127.0.0.1:${client.localPort}`)
    connection.write(Buffer.from('greeting'))
    connection.end()
    expect(connection.writable).toBe(false)
    await closed
    await clientEnded
    expect(Buffer.concat(received).toString()).toBe('greeting')
    expect(connection.descriptor()).toBeNull()
    client.destroy()
  })

  test('looks its peer up when first asked, and keeps it past the close', async () => {
    const first = await connect()
    expect(first.connection.peer()).toBe(`127.0.0.1:${first.client.localPort}`)
    first.connection.destroy()
    expect(first.connection.peer()).toBe(`127.0.0.1:${first.client.localPort}`)
    const second = await connect()
    second.connection.destroy()
    expect(second.connection.peer()).toBe('unknown')
    first.client.destroy()
    second.client.destroy()
  })

  test('makes its socket when first asked, which reads what the client sent before', async () => {
    const { client, connection } = await connect()
    client.write('early')
    const chunk = new Promise<string>((resolve) =>
      connection.setReceiver((bytes) => (resolve(bytes.toString()), true)),
    )
    connection.socket.resume()
    expect(await chunk).toBe('early')
    const closed = new Promise<void>((resolve) => connection.onClose(resolve))
    client.end()
    connection.end()
    await closed
    expect(connection.closed).toBe(true)
  })

  test('a close listener added after the close is told too', async () => {
    const { client, connection } = await connect()
    await new Promise<void>((resolve) => {
      connection.onClose(resolve)
      connection.destroy()
    })
    await new Promise<void>((resolve) => connection.onClose(resolve))
    client.destroy()
  })

  test('a connection closed before its socket was made gets a closed one', async () => {
    const { client, connection } = await connect()
    connection.destroy()
    expect(connection.socket.destroyed).toBe(true)
    client.destroy()
  })
})
