import net from 'node:net'
import { once } from 'node:events'
import { serialize } from 'pg-protocol'

const cancelRequestCode = 80877102
const sslRequestCode = 80877103

/** Opens a plain TCP connection and waits until it is established. */
export async function connectRaw(port: number, host = '127.0.0.1'): Promise<net.Socket> {
  const socket = net.connect({ host, port })
  socket.on('error', () => {}) // resets by the proxy are expected outcomes, read through 'close'
  await once(socket, 'connect')
  return socket
}

/** A frontend message with a 32-bit length and no type byte (startup, SSL and cancel requests). */
function untypedMessage(code: number, body: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(8)
  header.writeInt32BE(8 + body.length, 0)
  header.writeInt32BE(code, 4)
  return Buffer.concat([header, body])
}

export const sslRequest = (): Buffer => untypedMessage(sslRequestCode)

export function cancelRequest(processId: number, secretKey: number): Buffer {
  const body = Buffer.alloc(8)
  body.writeInt32BE(processId, 0)
  body.writeInt32BE(secretKey, 4)
  return untypedMessage(cancelRequestCode, body)
}

export const startupMessage = (user: string, database: string): Buffer =>
  serialize.startup({ user, database, application_name: 'pgfence-e2e-raw' })

/** Sends a CancelRequest on a new connection, the way libpq does, and waits for the close. */
export async function sendCancelRequest(port: number, processId: number, secretKey: number) {
  const socket = await connectRaw(port)
  socket.end(cancelRequest(processId, secretKey))
  await once(socket, 'close')
}

export interface Closed {
  /** Every byte the peer sent before closing. */
  received: Buffer
}

/** Resolves when the peer closes the socket; rejects if it is still open after `timeoutMs`. */
export function closedWithin(socket: net.Socket, timeoutMs: number): Promise<Closed> {
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  return new Promise((resolve, reject) => {
    if (socket.destroyed) return resolve({ received: Buffer.alloc(0) })
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`socket still open after ${timeoutMs} ms`))
    }, timeoutMs)
    socket.once('close', () => {
      clearTimeout(timer)
      resolve({ received: Buffer.concat(chunks) })
    })
  })
}

export interface BackendMessage {
  type: string
  body: Buffer
}

/** Splits backend bytes into typed messages; a trailing partial message is ignored. */
export function backendMessages(bytes: Buffer): BackendMessage[] {
  const messages: BackendMessage[] = []
  let offset = 0
  while (offset + 5 <= bytes.length) {
    const length = bytes.readInt32BE(offset + 1)
    if (offset + 1 + length > bytes.length) break
    messages.push({
      type: String.fromCharCode(bytes[offset]),
      body: bytes.subarray(offset + 5, offset + 1 + length),
    })
    offset += 1 + length
  }
  return messages
}

/** The SQLSTATE of an ErrorResponse body (field 'C'). */
export function errorCode(message: BackendMessage): string | undefined {
  for (const field of message.body.toString('utf8').split('\0')) {
    if (field.startsWith('C')) return field.slice(1)
  }
  return undefined
}

/** Logs in with a raw socket (trust auth) and resolves once the server is ready for a query. */
export async function loggedInRawSocket(port: number, user: string, database: string) {
  const socket = await connectRaw(port)
  const chunks: Buffer[] = []
  const ready = new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk)
      const messages = backendMessages(Buffer.concat(chunks))
      if (messages.some((message) => message.type === 'Z')) {
        socket.off('data', onData)
        resolve()
      }
      const failure = messages.find((message) => message.type === 'E')
      if (failure) reject(new Error(`login failed: ${errorCode(failure)}`))
    }
    socket.on('data', onData)
    socket.once('close', () => reject(new Error('closed during login')))
  })
  socket.write(startupMessage(user, database))
  await ready
  return socket
}
