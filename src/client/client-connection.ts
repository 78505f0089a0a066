import net from 'node:net'
import type tls from 'node:tls'
import { closeSync, writeSync } from 'node:fs'
import { ReadBufferPool, returnReadBuffer } from '../wire/read-buffer-pool.js'
import { descriptorOf } from '../net/socket-handle.js'
import { listenerOptionsInherited, noDelayForAccepted } from '../net/listener-options.js'

/**
 * Takes a client's incoming bytes. The chunk may be a view of a read buffer that is reused for
 * the next read: return false while it is still referenced (queued in a socket write), and
 * resume the socket once it is not.
 */
export type BytesReceiver = (chunk: Buffer) => boolean

/** Client messages are small; a large COPY streams through in pieces of this size. */
const readBuffers = new ReadBufferPool(16 * 1024, 64)

/**
 * A login in C that authenticated and still watches the client's descriptor (a duplicate), for
 * the native relay to take over (src/native/client-login.h).
 */
export type LoginWatch = { readonly brand: unique symbol }

/** What a connection does with its login's watch (src/auth/native-login.ts gives it). */
export interface LoginWatchControl {
  close(watch: LoginWatch): void
  /**
   * Reads the client through the watch: `onBytes` gets each read, undefined once at the client's
   * end; a return of false pauses reading until the next call.
   */
  read(watch: LoginWatch, onBytes: (chunk: Buffer | undefined) => boolean): void
}

/**
 * What Node's accepting handle gives for a client: its TCP (or pipe) handle, no socket yet; or
 * a bare descriptor the addon accepted (`bare`), on which a socket is made by its number.
 */
interface AcceptedHandle {
  fd: number
  bare?: true
  /** The descriptor stays the native relay's, which closes it: no socket is ever made on it. */
  relayed?: boolean
  setNoDelay?(enable: boolean): number
  getpeername?(out: { address?: string; port?: number }): number
  /** Closes the descriptor at once; the handle itself is freed on the loop's next turn. */
  close(): void
}

/**
 * A client connection whose bytes go to whichever phase owns it now: startup, then the session.
 * One accepted for a login in C has no Node socket until JavaScript must read or write through
 * one (`socket`): a pooled session the native relay carries from the login on never needs it,
 * nor does a transaction-mode session read through the login's watch (startReading) whose
 * answers the kernel takes at once; both spare the socket's making and closing.
 */
export class ClientConnection {
  private receiver: BytesReceiver = () => false
  private stopDataEvents: (() => void) | null = null
  private own: net.Socket | tls.TLSSocket | null = null
  /** The accepted handle, while no socket was made on it and it is open. */
  private handle: AcceptedHandle | null = null
  private readonly closeListeners = new Set<() => void>()
  private closeNotified = false
  private readonly errorListeners: ((err: Error) => void)[] = []
  /** The login's watch on the descriptor, and what to do with it, until a relay takes it. */
  private loginWatch: LoginWatch | null = null
  private watchControl: LoginWatchControl | null = null
  /** Reading was asked for (startReading): a socket made to write the rest reads too. */
  private reading = false
  private peerName: string | undefined

  private constructor(socket: net.Socket | tls.TLSSocket | null) {
    if (socket) this.adopt(socket)
  }

  /**
   * A client socket on an accepted handle or a descriptor (the plaintext end of a TLS channel
   * in the addon) that reads into one buffer of its own (Node's `onread`, from a pool; see
   * ReadBufferPool), which skips the stream machinery and an allocation on every read.
   * `paused`: it reads only once resumed (a login in C reads the descriptor first).
   */
  static readingIntoBuffer(
    source: { handle: unknown } | { fd: number },
    paused = false,
  ): ClientConnection {
    const connection = new ClientConnection(null)
    connection.adopt(connection.readingSocket(source, paused))
    return connection
  }

  /** A client on an accepted handle with no socket yet: one is made, not reading, when needed. */
  static onHandle(handle: AcceptedHandle): ClientConnection {
    const connection = new ClientConnection(null)
    connection.handle = handle
    if (!listenerOptionsInherited) handle.setNoDelay?.(true)
    return connection
  }

  /**
   * A client the addon accepted (src/auth/native-accept.ts): its descriptor, JavaScript's to
   * close, with no socket until one is needed. `peerName`: the descriptor's peer address.
   * `relayed`: the native relay carries the client from its login in C on (lending in C), and the
   * descriptor is the relay's, read only for the peer's address: closing the connection leaves it
   * to the relay, and bytes the kernel does not take at once are dropped (an error at the end).
   */
  static onDescriptor(
    fd: number,
    peerName: (fd: number, out: { address?: string; port?: number }) => number,
    relayed = false,
  ): ClientConnection {
    return ClientConnection.onHandle({
      fd,
      bare: true,
      relayed,
      getpeername: (out) => peerName(fd, out),
      close: relayed ? () => {} : () => closeSync(fd),
    })
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

  /**
   * The client's Node socket, made on first use for a connection accepted without one (it reads
   * once resumed). A connection closed before that gets a socket destroyed already.
   */
  get socket(): net.Socket | tls.TLSSocket {
    if (this.own) return this.own
    this.dropLoginWatch()
    const handle = this.handle
    this.handle = null
    const source = handle?.bare ? { fd: handle.fd } : { handle }
    const socket =
      handle && !handle.relayed ? this.adopt(this.readingSocket(source, true)) : closedSocket()
    for (const listener of this.errorListeners) socket.on('error', listener)
    return (this.own = socket)
  }

  /**
   * The login in C goes on watching the descriptor, for a relay to take over (takeLoginWatch)
   * or to read the client (startReading); the watch is closed when anything else reads or closes
   * the client. A duplicate of the descriptor left open would keep the connection open after the
   * client's own close.
   */
  keepLoginWatch(watch: LoginWatch, control: LoginWatchControl): void {
    this.loginWatch = watch
    this.watchControl = control
  }

  /**
   * Delivers the client's bytes to the receiver from now on (again, after it returned false):
   * through the login's watch while the client has no socket, so that a session that reads the
   * client from JavaScript needs none until it writes more than the kernel takes at once.
   */
  startReading(): void {
    this.reading = true
    if (this.own || !this.loginWatch) return void this.socket.resume()
    this.watchControl!.read(this.loginWatch, (chunk) => {
      if (chunk) return this.receive(chunk)
      this.destroy()
      return false
    })
  }

  /** The login's watch, for the native relay to take over; null when there is none. */
  takeLoginWatch(): LoginWatch | null {
    const watch = this.loginWatch
    this.loginWatch = null
    return watch
  }

  private dropLoginWatch(): void {
    const watch = this.takeLoginWatch()
    if (watch) this.watchControl!.close(watch)
  }

  /** The client's descriptor while it has no socket and is open, else its socket. */
  socketOrDescriptor(): net.Socket | number {
    return this.handle?.fd ?? this.socket
  }

  /** The descriptor the client's bytes arrive on, or null when it has none (closed). */
  descriptor(): number | null {
    const target = this.socketOrDescriptor()
    return typeof target === 'number' ? target : descriptorOf(target)
  }

  /**
   * The client's address, or 'unix socket' for a Unix-domain client: looked up when first asked
   * (most connections never are), 'unknown' if that is after the connection closed.
   */
  peer(): string {
    return (this.peerName ??= this.lookUpPeer())
  }

  private lookUpPeer(): string {
    if (this.closed) return 'unknown'
    if (this.own) {
      const { remoteAddress, remotePort } = this.own
      return remoteAddress ? `${remoteAddress}:${remotePort}` : 'unix socket'
    }
    const out: { address?: string; port?: number } = {}
    this.handle?.getpeername?.(out)
    return out.address ? `${out.address}:${out.port}` : 'unix socket'
  }

  get closed(): boolean {
    return this.own ? this.own.destroyed : this.handle === null
  }

  /** Whether bytes written now would still go out (neither ended nor closed). */
  get writable(): boolean {
    return this.own ? this.own.writable : this.handle !== null
  }

  /**
   * Calls `listener` once the connection has closed (soon, if it has already: a session may
   * start after its client left); returns a function that takes it off.
   */
  onClose(listener: () => void): () => void {
    if (this.closeNotified) {
      queueMicrotask(listener)
      return () => false
    }
    this.closeListeners.add(listener)
    return () => this.closeListeners.delete(listener)
  }

  onError(listener: (err: Error) => void): void {
    if (this.own) this.own.on('error', listener)
    else this.errorListeners.push(listener)
  }

  /**
   * Writes to the client. Without a socket the bytes go straight to the descriptor; what the
   * kernel does not take at once (a client that reads nothing) goes through a socket made then.
   */
  write(bytes: Buffer): void {
    if (!this.handle) return void this.socket.write(bytes)
    let written = 0
    try {
      written = writeSync(this.handle.fd, bytes)
    } catch (err) {
      // EAGAIN: the socket below queues it all; anything else: the client is gone.
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return this.destroy()
    }
    if (written === bytes.length) return
    const socket = this.socket
    // What the watch read has been received: the socket reads what follows.
    if (this.reading) socket.resume()
    socket.write(bytes.subarray(written))
  }

  /** Closes once what was written has gone out. */
  end(): void {
    if (!this.own) return this.closeHandle()
    this.own.end()
    this.own.destroySoon()
  }

  /** Closes now. */
  destroy(): void {
    if (this.own) this.own.destroy()
    else this.closeHandle()
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

  /** The connection's socket from now on, whose close is the connection's. */
  private adopt<S extends net.Socket>(socket: S): S {
    this.own = socket
    socket.once('close', () => this.notifyClosed())
    return socket
  }

  private closeHandle(): void {
    this.dropLoginWatch()
    if (!this.handle) return
    // No close callback: Node would make one more call into JavaScript for it.
    this.handle.close()
    this.handle = null
    queueMicrotask(() => this.notifyClosed())
  }

  private notifyClosed(): void {
    this.closeNotified = true
    for (const listener of this.closeListeners) listener()
    this.closeListeners.clear()
  }

  private readingSocket(
    source: { handle: unknown } | { fd: number },
    manualStart: boolean,
  ): net.Socket {
    const buffer = readBuffers.take()
    // Whether the last chunk read is still referenced (see BytesReceiver).
    let held = false
    // Every option named, no spread: V8 (11.3) gives an object spread and then added to a new
    // hidden class each time (test/session/hidden-classes.test.ts). Node's Socket copies its
    // options and sets the last four on the copy: present already, they are no additions.
    const socket: net.Socket = new net.Socket({
      handle: 'handle' in source ? source.handle : undefined,
      fd: 'fd' in source ? source.fd : undefined,
      readable: true,
      writable: true,
      manualStart,
      allowHalfOpen: false,
      emitClose: false,
      autoDestroy: true,
      decodeStrings: false,
      onread: {
        buffer,
        callback: (length: number, bytes: Uint8Array) => {
          held = !this.receive(Buffer.from(bytes.buffer, bytes.byteOffset, length))
          return !held
        },
      },
    } as unknown as net.SocketConstructorOpts)
    readBuffers.lend(socket, buffer)
    // A socket that reads no more frees its buffer for the next client, unless a write still
    // holds its last chunk (a socket the native relay took has given it back already).
    socket.once('close', () => held || returnReadBuffer(socket))
    return socket
  }
}

/** A socket closed already: what a connection closed before it had one gets. */
function closedSocket(): net.Socket {
  const socket = new net.Socket()
  socket.destroy()
  return socket
}

type AcceptHandle = { onconnection?: (err: number, handle: AcceptedHandle) => void }

/**
 * Accepts clients. With `reuseReadBuffers`, each client socket reads into a buffer of its own
 * (ClientConnection.readingIntoBuffer): the accepting handle's connection callback is taken
 * over to build the socket with that option, since `net.Server` offers none. Falls back to
 * ordinary sockets if that callback is absent. `onHandle` (with `reuseReadBuffers`): no socket
 * is made until one is needed (ClientConnection.onHandle), for a login in C to read first.
 */
export function acceptClients(
  server: net.Server,
  reuseReadBuffers: boolean,
  onClient: (connection: ClientConnection, started: boolean) => void,
  onHandle = false,
): void {
  const handle = (server as unknown as { _handle?: AcceptHandle })._handle
  noDelayForAccepted(server)
  const perClient = !listenerOptionsInherited
  if (!reuseReadBuffers || typeof handle?.onconnection !== 'function') {
    server.on('connection', (socket) => {
      if (perClient) socket.setNoDelay(true)
      onClient(ClientConnection.fromDataEvents(socket), true)
    })
    return
  }
  handle.onconnection = (err, clientHandle) => {
    if (err) return server.emit('error', new Error(`accept failed (${err})`))
    if (onHandle) return onClient(ClientConnection.onHandle(clientHandle), false)
    const connection = ClientConnection.readingIntoBuffer({ handle: clientHandle })
    if (perClient) connection.socket.setNoDelay(true)
    onClient(connection, true)
  }
}
