import net from 'node:net'
import type tls from 'node:tls'
import { ReadBufferPool, returnReadBuffer } from '../wire/read-buffer-pool.js'

/**
 * Takes a client's incoming bytes. The chunk may be a view of a read buffer that is reused for
 * the next read: return false while it is still referenced (queued in a socket write), and
 * resume the socket once it is not.
 */
export type BytesReceiver = (chunk: Buffer) => boolean

/** Client messages are small; a large COPY streams through in pieces of this size. */
const readBuffers = new ReadBufferPool(16 * 1024, 64)

/** A client socket whose bytes go to whichever phase owns it now: startup, then the session. */
export class ClientConnection {
  private receiver: BytesReceiver = () => false
  private stopDataEvents: (() => void) | null = null

  constructor(readonly socket: net.Socket | tls.TLSSocket) {}

  /**
   * A client socket on an accepted handle or a descriptor (the plaintext end of a TLS channel
   * in the addon) that reads into one buffer of its own (Node's `onread`, from a pool; see
   * ReadBufferPool), which skips the stream machinery and an allocation on every read.
   */
  static readingIntoBuffer(
    source: { handle: unknown } | { fd: number },
    /** The socket starts reading when resumed (the login in C reads its descriptor first). */
    manualStart = false,
  ): ClientConnection {
    const buffer = readBuffers.take()
    // Whether the last chunk read is still referenced (see BytesReceiver).
    let held = false
    const socket: net.Socket = new net.Socket({
      ...source,
      readable: true,
      writable: true,
      manualStart,
      onread: {
        buffer,
        callback: (length: number, bytes: Uint8Array) => {
          held = !connection.receive(Buffer.from(bytes.buffer, bytes.byteOffset, length))
          return !held
        },
      },
    } as unknown as net.SocketConstructorOpts)
    readBuffers.lend(socket, buffer)
    // A socket that reads no more frees its buffer for the next client, unless a write still
    // holds its last chunk (a socket the native relay took has given it back already).
    socket.once('close', () => held || returnReadBuffer(socket))
    const connection = new ClientConnection(socket)
    return connection
  }

  /** For sockets that deliver 'data' events (Node's TLS, or when buffers cannot be reused). */
  static fromDataEvents(socket: net.Socket | tls.TLSSocket): ClientConnection {
    const connection = new ClientConnection(socket)
    const onData = (chunk: Buffer) => {
      if (!connection.receive(chunk)) socket.pause()
    }
    socket.on('data', onData)
    connection.stopDataEvents = () => socket.off('data', onData)
    return connection
  }

  receive(chunk: Buffer): boolean {
    return this.receiver(chunk)
  }

  setReceiver(receiver: BytesReceiver): void {
    this.receiver = receiver
  }

  /** Hands the socket to another layer (TLS): this object reads no more. */
  release(): void {
    this.stopDataEvents?.()
    this.socket.pause()
  }
}

type AcceptHandle = { onconnection?: (err: number, handle: unknown) => void }

/**
 * Accepts clients. With `reuseReadBuffers`, each client socket reads into a buffer of its own
 * (ClientConnection.readingIntoBuffer): the accepting handle's connection callback is taken
 * over to build the socket with that option, since `net.Server` offers none. Falls back to
 * ordinary sockets if that callback is absent. `manualStart` (with `reuseReadBuffers`): the
 * sockets read nothing until resumed.
 */
export function acceptClients(
  server: net.Server,
  reuseReadBuffers: boolean,
  onClient: (connection: ClientConnection, started: boolean) => void,
  manualStart = false,
): void {
  const handle = (server as unknown as { _handle?: AcceptHandle })._handle
  if (!reuseReadBuffers || typeof handle?.onconnection !== 'function') {
    server.on('connection', (socket) => {
      socket.setNoDelay(true)
      onClient(ClientConnection.fromDataEvents(socket), true)
    })
    return
  }
  handle.onconnection = (err, clientHandle) => {
    if (err) return server.emit('error', new Error(`accept failed (${err})`))
    const connection = ClientConnection.readingIntoBuffer({ handle: clientHandle }, manualStart)
    connection.socket.setNoDelay(true)
    onClient(connection, !manualStart)
  }
}
