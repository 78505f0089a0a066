import type net from 'node:net'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import { X509Certificate } from 'node:crypto'
import type { Config } from '../config/schema.js'
import { nodeClientTls, tlsHandshakeFailed, type StartClientTls } from './startup-handshake.js'
import { ClientConnection } from './client-connection.js'
import {
  isEncrypted,
  nativeTlsAvailable,
  nativeTlsContext,
  peerCertificateOf,
  startNativeTls,
  channelEnd,
  NativeTlsError,
  type NativeTlsChannel,
  type NativeTlsContext,
} from '../net/native-tls.js'

/** TLS towards clients (config `tls`). */
export interface ClientTls {
  start: StartClientTls
  /**
   * Set when the handshake runs in the addon (its context, which logins in C take TLS up with
   * too): the addon takes the client's descriptor over, so until then the socket may read into
   * a buffer of its own (ClientConnection.readingIntoBuffer), where Node's TLS needs the
   * socket's own reads.
   */
  context?: NativeTlsContext
  /** DER of the certificate clients see, to compare with the upstream's. */
  certificate: Buffer
}

const CLOSED_IN_HANDSHAKE = new Error('client closed the connection during TLS handshake')

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
    let plaintext: ClientConnection | undefined
    try {
      await startNativeTls(raw, context, '', gone.signal, (fd) => {
        plaintext = ClientConnection.readingIntoBuffer({ fd })
        return plaintext.socket
      })
    } catch (err) {
      // A client that left (or did during the handshake) is no error to report, as with Node's.
      if (gone.signal.aborted || (err instanceof NativeTlsError && err.peerClosed))
        throw CLOSED_IN_HANDSHAKE
      throw tlsHandshakeFailed((err as Error).message)
    } finally {
      raw.off('close', onClose)
    }
    const secure = plaintext!.socket
    secure.once('close', () => raw.destroy())
    raw.once('close', () => secure.destroy())
    return plaintext!
  }

/**
 * The plaintext end (`fd`) of the TLS channel a login in C handed over
 * (NativeLoginResult.inside), tied to the client's TCP connection: either closing closes both.
 * It reads once resumed.
 */
export function connectionInsideTls(
  raw: ClientConnection,
  channel: NativeTlsChannel,
  fd: number,
): ClientConnection {
  const plaintext = ClientConnection.readingIntoBuffer({ fd }, true)
  const secure = channelEnd(plaintext.socket, channel)
  secure.once('close', () => raw.destroy())
  raw.onClose(() => secure.destroy())
  return plaintext
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
      certificate,
    }
  const context = nativeTlsContext({ server: true, verify: false, cert, key })
  return {
    start: nativeClientTls(context),
    context,
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
