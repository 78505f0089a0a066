import net from 'node:net'
import { once } from 'node:events'
import { execFileSync } from 'node:child_process'
import { closeSync, constants, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, expect, test } from 'vitest'
import { acceptClients, ClientConnection } from '../../src/client/client-connection.js'

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
