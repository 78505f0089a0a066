import net from 'node:net'
import tls from 'node:tls'
import { nativeAddon } from '../native-addon.js'
import { descriptorOf, stopReading } from './socket-handle.js'

/**
 * TLS in the native addon (src/native/tls-channel.c, tls-context.c), so that encrypted sessions
 * can be relayed natively: C takes a TCP socket over after the plaintext SSLRequest/'S'
 * exchange, runs the handshake with OpenSSL (the one Node itself carries), and gives back a
 * plaintext socket, the end of a socketpair it pumps to and from the TLS connection. The login
 * runs on that socket as on a plain one (a pooled client's in C, on its descriptor); the native
 * relay later reads and writes the TLS connection itself (relay({ clientTls, serverTls })).
 */

/** An opaque OpenSSL context: the settings of one leg. */
export type NativeTlsContext = { readonly brand: unique symbol }

/** A TLS connection C owns. */
export interface NativeTlsChannel {
  /** The DER of the peer's certificate, if it presented one. */
  peerCertificate(): Buffer | undefined
  /** Ends a handshake under way (its result is then an error). */
  close(): void
}

export interface NativeTlsSettings {
  server: boolean
  /** Check the peer's certificate chain (client: and its name, the host). */
  verify: boolean
  /** PEM: the CAs to trust (client; absent: the system's). */
  ca?: Buffer
  /** PEM: the certificate chain and key to present (server). */
  cert?: Buffer
  key?: Buffer
}

interface NativeTlsModule {
  tlsContext(settings: NativeTlsSettings): NativeTlsContext
  tlsStart(
    context: NativeTlsContext,
    fd: number,
    host: string,
    onDone: (error: string | null, plaintextFd: number, peerClosed: boolean) => void,
  ): NativeTlsChannel
}

const addon =
  typeof nativeAddon?.tlsStart === 'function' ? (nativeAddon as unknown as NativeTlsModule) : null

/** Whether the addon was built with TLS. */
export const nativeTlsAvailable = addon !== null

/** The settings as an OpenSSL context; throws when the certificate or key cannot be used. */
export function nativeTlsContext(settings: NativeTlsSettings): NativeTlsContext {
  return addon!.tlsContext(settings)
}

/** A failed handshake, in OpenSSL's words; `peerClosed`: the peer left during it. */
export class NativeTlsError extends Error {
  constructor(
    message: string,
    readonly peerClosed: boolean,
  ) {
    super(message)
  }
}

const channels = new WeakMap<net.Socket, NativeTlsChannel>()

/** The TLS channel whose plaintext end `socket` is, if it is one. */
export function nativeTlsChannel(socket: net.Socket): NativeTlsChannel | undefined {
  return channels.get(socket)
}

/** Whether the socket's bytes travel encrypted (Node's TLS or a native channel). */
export function isEncrypted(socket: net.Socket): boolean {
  return socket instanceof tls.TLSSocket || channels.has(socket)
}

/** The DER of the certificate the peer presented on an encrypted socket. */
export function peerCertificateOf(socket: net.Socket): Buffer | undefined {
  if (socket instanceof tls.TLSSocket) return socket.getPeerCertificate().raw
  return channels.get(socket)?.peerCertificate()
}

/** A Node socket on the plaintext end's descriptor. */
const plainSocket = (fd: number) => new net.Socket({ fd, readable: true, writable: true })

/**
 * Runs the TLS handshake over `socket` in C and resolves with the plaintext socket to speak on
 * (made by `open` from its descriptor); rejects with a NativeTlsError. `socket` reads no more;
 * its descriptor stays with the caller (C keeps a duplicate). `abort` ends a handshake under way.
 */
export function startNativeTls(
  socket: net.Socket,
  context: NativeTlsContext,
  host: string,
  abort?: AbortSignal,
  open: (fd: number) => net.Socket = plainSocket,
): Promise<net.Socket> {
  const fd = descriptorOf(socket)
  if (fd === null) return Promise.reject(new Error('the connection was closed'))
  stopReading(socket)
  return new Promise((resolve, reject) => {
    const onAbort = () => channel.close()
    const channel = addon!.tlsStart(context, fd, host, (error, plaintextFd, peerClosed) => {
      abort?.removeEventListener('abort', onAbort)
      if (error !== null) return reject(new NativeTlsError(error, peerClosed))
      resolve(channelEnd(open(plaintextFd), channel))
    })
    abort?.addEventListener('abort', onAbort)
  })
}

/**
 * Marks `plaintext` as a channel's plaintext end (a handshake's started here, or one a login in
 * C ran: tls_channel_adopt) and returns it.
 */
export function channelEnd(plaintext: net.Socket, channel: NativeTlsChannel): net.Socket {
  channels.set(plaintext, channel)
  return plaintext
}
