import net from 'node:net'
import { once } from 'node:events'
import { afterEach, beforeEach, expect, test } from 'vitest'
import { acceptClients, type ClientConnection } from '../../src/client/client-connection.js'

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
