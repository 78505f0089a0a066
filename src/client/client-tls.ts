import type net from 'node:net'
import tls from 'node:tls'
import { readFileSync, writeSync } from 'node:fs'
import { X509Certificate } from 'node:crypto'
import type { Config } from '../config/schema.js'
import { ANSWER_YES, nodeClientTls, type StartClientTls } from './startup-handshake.js'
import { ClientConnection } from './client-connection.js'
import {
  isEncrypted,
  nativeTlsAvailable,
  nativeTlsContext,
  peerCertificateOf,
  startNativeTls,
  startNativeTlsOn,
  NativeTlsError,
  type NativeTlsContext,
} from '../net/native-tls.js'
import { PgError } from '../wire/error-response.js'

/** TLS towards clients (config `tls`). */
export interface ClientTls {
  start: StartClientTls
  /**
   * The handshake runs in the addon, which takes the client's descriptor over: until then the
   * socket may read into a buffer of its own (ClientConnection.readingIntoBuffer), where Node's
   * TLS needs the socket's own reads.
   */
  native: boolean
  /**
   * With the handshake in C: answers the SSLRequest of a client no socket reads yet (its login
   * in C handed the request over alone) and runs the handshake on its descriptor; the plaintext
   * end reads only once resumed, for a login in C to read it first.
   */
  startOnDescriptor?: (raw: ClientConnection) => Promise<ClientConnection>
  /** DER of the certificate clients see, to compare with the upstream's. */
  certificate: Buffer
}

/**
 * The handshake in C (src/net/native-tls.ts): the client's TCP socket reads no more and
 * lives as long as the plaintext socket that replaces it, which closes when it closes (the
 * startup timeout destroys it).
 */
const nativeClientTls =
  (context: NativeTlsContext): StartClientTls =>
  async (raw) => {
    const gone = new AbortController()
    const onClose = () => gone.abort()
    raw.once('close', onClose)
    const plaintext = await handshakeInC(
      (open) => startNativeTls(raw, context, '', gone.signal, open),
      gone.signal,
      false,
    ).finally(() => raw.off('close', onClose))
    const secure = plaintext.socket
    secure.once('close', () => raw.destroy())
    raw.once('close', () => secure.destroy())
    return plaintext
  }

/** ClientTls.startOnDescriptor: as nativeClientTls, with no socket made on the TCP descriptor. */
const nativeTlsOnDescriptor =
  (context: NativeTlsContext) =>
  async (raw: ClientConnection): Promise<ClientConnection> => {
    const fd = raw.descriptor()
    // One byte to a connection that has sent only its request: the kernel takes it at once.
    if (fd === null || writeSync(fd, ANSWER_YES) !== 1) throw CLOSED_IN_HANDSHAKE
    const gone = new AbortController()
    const stopWatching = raw.onClose(() => gone.abort())
    const plaintext = await handshakeInC(
      (open) => startNativeTlsOn(fd, context, '', gone.signal, open),
      gone.signal,
      true,
    ).finally(stopWatching)
    const secure = plaintext.socket
    secure.once('close', () => raw.destroy())
    raw.onClose(() => secure.destroy())
    return plaintext
  }

const CLOSED_IN_HANDSHAKE = new Error('client closed the connection during TLS handshake')

/**
 * Runs a handshake in C (`start`, given how to open the plaintext end) and resolves with the
 * plaintext end as a connection, reading or `paused`; a client that left (`gone`, or during the
 * handshake) is no error to report, as with Node's TLS.
 */
async function handshakeInC(
  start: (open: (fd: number) => net.Socket) => Promise<net.Socket>,
  gone: AbortSignal,
  paused: boolean,
): Promise<ClientConnection> {
  let plaintext: ClientConnection | undefined
  try {
    await start((fd) => (plaintext = ClientConnection.readingIntoBuffer({ fd }, paused)).socket)
  } catch (err) {
    if (gone.aborted || (err instanceof NativeTlsError && err.peerClosed)) throw CLOSED_IN_HANDSHAKE
    throw new PgError('08P01', `TLS handshake failed: ${(err as Error).message}`)
  }
  return plaintext!
}

/** The configured certificate, with the handshake in C when the native relay runs. */
export function clientTls(config: Config, native: boolean): ClientTls | undefined {
  if (!config.tls) return undefined
  const cert = readFileSync(config.tls.cert)
  const key = readFileSync(config.tls.key)
  const inAddon = native && nativeTlsAvailable
  const certificate = new X509Certificate(cert).raw
  if (!inAddon)
    return {
      start: nodeClientTls(tls.createSecureContext({ cert, key })),
      native: false,
      certificate,
    }
  const context = nativeTlsContext({ server: true, verify: false, cert, key })
  return {
    start: nativeClientTls(context),
    native: true,
    startOnDescriptor: nativeTlsOnDescriptor(context),
    certificate,
  }
}

/** Channel binding survives the proxy only when both legs show the same server certificate. */
export function sameCertificate(
  client: net.Socket,
  upstream: net.Socket,
  ours?: ClientTls,
): boolean {
  if (!ours || !isEncrypted(client) || !isEncrypted(upstream)) return false
  return peerCertificateOf(upstream)?.equals(ours.certificate) ?? false
}
