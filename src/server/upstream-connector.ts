import net from 'node:net'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import type { Config, TcpKeepaliveConfig } from '../config/schema.js'
import { PgError } from '../wire/error-response.js'
import { SSL_ACCEPTED, SSL_REFUSED, SSL_REQUEST_CODE } from '../wire/protocol.js'
import { encodeRequestCode } from '../wire/startup-packet.js'
import { ReadBufferPool } from '../wire/read-buffer-pool.js'
import { applyKeepalive } from '../net/tcp-keepalive.js'
import {
  nativeTlsAvailable,
  nativeTlsContext,
  startNativeTls,
  type NativeTlsContext,
} from '../net/native-tls.js'

type UpstreamConfig = Config['upstream']

export type UpstreamSocket = net.Socket | tls.TLSSocket

/**
 * Receives the server's bytes. The chunk may be a view of a buffer that is reused for the next
 * read: return false while it is still referenced (a write not yet flushed) and call
 * `resume()` on the socket once it is not.
 */
export type ServerBytesHandler = (chunk: Buffer) => boolean

/** One read buffer per plain-TCP upstream connection, reused for every read (from a pool). */
const readBuffers = new ReadBufferPool(64 * 1024, 16)

export const unreachable = (upstream: UpstreamConfig, reason: string): PgError =>
  new PgError(
    '08006',
    `could not connect to upstream server ${upstream.host}:${upstream.port}: ${reason}`,
  )

export interface ConnectOptions {
  /** Receives the server's bytes (plain TCP: read into one reused buffer). */
  onBytes?: ServerBytesHandler
  keepalive?: TcpKeepaliveConfig
  /** Aborted when the whole login is out of time: the socket is destroyed, with its reason. */
  deadline?: AbortSignal
  /**
   * TLS in the native addon (src/net/native-tls.ts), so that the native relay can take the
   * session; else (or when the addon is not built) Node's TLSSocket.
   */
  nativeTls?: boolean
}

/**
 * A socket made by `make` with Node's `onread`: its reads land in a buffer lent from the pool,
 * handed to `onBytes` as views of it.
 */
function readingIntoPool(
  onBytes: ServerBytesHandler,
  make: (onread: net.OnReadOpts) => net.Socket,
): net.Socket {
  const buffer = readBuffers.take()
  const socket = make({
    buffer,
    callback: (length, bytes) => onBytes(Buffer.from(bytes.buffer, bytes.byteOffset, length)),
  })
  readBuffers.lend(socket, buffer)
  return socket
}

/** Opens a TCP connection within the configured timeout, Nagle off. */
export function connectTcp(
  upstream: UpstreamConfig,
  { onBytes, keepalive, deadline }: ConnectOptions = {},
): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const options = { host: upstream.host, port: upstream.port, noDelay: true }
    const socket = onBytes
      ? readingIntoPool(onBytes, (onread) => net.connect({ ...options, onread }))
      : net.connect(options)
    const settle = (error?: PgError) => {
      clearTimeout(timer)
      deadline?.removeEventListener('abort', onDeadline)
      if (!error) return resolve(socket)
      socket.destroy()
      reject(error)
    }
    const onDeadline = () => settle(deadline!.reason)
    const timer = setTimeout(
      () => settle(unreachable(upstream, `timeout after ${upstream.connectTimeoutMs} ms`)),
      upstream.connectTimeoutMs,
    )
    deadline?.addEventListener('abort', onDeadline)
    socket.once('connect', () => {
      socket.removeAllListeners('error')
      if (keepalive) applyKeepalive(socket, keepalive)
      settle()
    })
    socket.once('error', (err) => settle(unreachable(upstream, err.message)))
  })
}

/** One step of the login on `socket`: past the deadline the socket goes, the step fails with it. */
async function beforeDeadline<T>(
  socket: net.Socket,
  deadline: AbortSignal | undefined,
  step: Promise<T>,
): Promise<T> {
  const onDeadline = () => socket.destroy()
  deadline?.addEventListener('abort', onDeadline)
  try {
    return await step
  } catch (err) {
    throw deadline?.aborted ? deadline.reason : err
  } finally {
    deadline?.removeEventListener('abort', onDeadline)
  }
}

/**
 * Asks the server for TLS and reads its one-byte answer, which `reads.to` is set to take until
 * then (it gets what it was back).
 */
function negotiateTls(
  socket: net.Socket,
  upstream: UpstreamConfig,
  reads: { to: ServerBytesHandler },
): Promise<boolean> {
  const after = reads.to
  return new Promise((resolve, reject) => {
    const fail = (reason: string) => {
      cleanup()
      socket.destroy()
      reject(unreachable(upstream, reason))
    }
    const onData = (chunk: Buffer) => {
      cleanup()
      // Anything after the answer byte would be injected plaintext (CVE-2021-23222).
      if (chunk.length !== 1) fail('unexpected data after the TLS answer')
      else if (chunk[0] === SSL_ACCEPTED) resolve(true)
      else if (chunk[0] === SSL_REFUSED) resolve(false)
      else fail('invalid answer to SSLRequest')
      return true
    }
    const onError = (err: Error) => fail(err.message)
    const onClose = () => fail('connection closed during TLS negotiation')
    const cleanup = () => {
      reads.to = after
      socket.off('error', onError)
      socket.off('close', onClose)
    }
    reads.to = onData
    socket.on('error', onError)
    socket.on('close', onClose)
    socket.write(encodeRequestCode(SSL_REQUEST_CODE))
  })
}

function startTls(socket: net.Socket, upstream: UpstreamConfig): Promise<tls.TLSSocket> {
  const verify = upstream.tls === 'verify-full'
  return new Promise((resolve, reject) => {
    const secure = tls.connect({
      socket,
      servername: net.isIP(upstream.host) ? undefined : upstream.host,
      rejectUnauthorized: verify,
      ca: upstream.ca ? readFileSync(upstream.ca) : undefined,
      checkServerIdentity: verify
        ? (_, cert) => tls.checkServerIdentity(upstream.host, cert)
        : () => undefined,
    })
    secure.once('secureConnect', () => {
      secure.removeAllListeners('error')
      resolve(secure)
    })
    secure.once('error', (err) => {
      socket.destroy()
      reject(unreachable(upstream, `TLS: ${err.message}`))
    })
  })
}

/** One OpenSSL context per upstream config: the CA is read once. */
const nativeContexts = new WeakMap<UpstreamConfig, NativeTlsContext>()

function nativeContextFor(upstream: UpstreamConfig): NativeTlsContext {
  let context = nativeContexts.get(upstream)
  if (!context) {
    const ca = upstream.ca ? readFileSync(upstream.ca) : undefined
    context = nativeTlsContext({ server: false, verify: upstream.tls === 'verify-full', ca })
    nativeContexts.set(upstream, context)
  }
  return context
}

/**
 * The handshake in C: the same checks as startTls, the socket handed over to the addon. The
 * plaintext socket reads into a pooled buffer, as plain TCP does.
 */
async function startTlsNatively(
  socket: net.Socket,
  upstream: UpstreamConfig,
  onBytes: ServerBytesHandler,
  deadline?: AbortSignal,
): Promise<net.Socket> {
  const open = (fd: number) =>
    readingIntoPool(
      onBytes,
      (onread) =>
        new net.Socket({ fd, readable: true, writable: true, onread } as net.SocketConstructorOpts),
    )
  try {
    return await startNativeTls(socket, nativeContextFor(upstream), upstream.host, deadline, open)
  } catch (err) {
    if (deadline?.aborted) throw deadline.reason
    throw unreachable(upstream, `TLS: ${(err as Error).message}`)
  } finally {
    socket.destroy() // the addon holds its own descriptor of the connection
  }
}

/**
 * A connection to the upstream server, encrypted as `upstream.tls` asks, delivering the
 * server's bytes to `onBytes`. Plain TCP and the addon's TLS read into one reused buffer (no
 * allocation per read); Node's TLS reads the socket itself.
 */
export async function connectUpstream(
  upstream: UpstreamConfig,
  onBytes: ServerBytesHandler,
  options: Omit<ConnectOptions, 'onBytes'> = {},
): Promise<UpstreamSocket> {
  if (upstream.tls === 'disable') return connectTcp(upstream, { ...options, onBytes })
  // The answer to the SSLRequest first; the server's bytes next if it refused TLS.
  const reads = { to: onBytes }
  const socket = await connectTcp(upstream, { ...options, onBytes: (chunk) => reads.to(chunk) })
  const accepted = await beforeDeadline(
    socket,
    options.deadline,
    negotiateTls(socket, upstream, reads),
  )
  if (!accepted && upstream.tls !== 'prefer') {
    socket.destroy()
    throw unreachable(upstream, 'the server does not support TLS, but upstream.tls requires it')
  }
  if (!accepted) return socket
  if (options.nativeTls && nativeTlsAvailable)
    return startTlsNatively(socket, upstream, onBytes, options.deadline)
  const secure = await beforeDeadline(socket, options.deadline, startTls(socket, upstream))
  secure.on('data', (chunk: Buffer) => {
    if (!onBytes(chunk)) secure.pause()
  })
  return secure
}
