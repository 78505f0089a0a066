import type net from 'node:net'
import tls from 'node:tls'
import { readFileSync } from 'node:fs'
import { X509Certificate } from 'node:crypto'
import type { Config } from '../config/schema.js'
import { nodeClientTls, type StartClientTls } from './startup-handshake.js'
import { ClientConnection } from './client-connection.js'
import {
  isEncrypted,
  nativeTlsAvailable,
  nativeTlsContext,
  peerCertificateOf,
  startNativeTls,
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
  async (raw, paused = false) => {
    const gone = new AbortController()
    const onClose = () => gone.abort()
    raw.once('close', onClose)
    let plaintext: ClientConnection | undefined
    try {
      await startNativeTls(
        raw,
        context,
        '',
        gone.signal,
        (fd) => (plaintext = ClientConnection.readingIntoBuffer({ fd }, paused)).socket,
      )
    } catch (err) {
      raw.off('close', onClose)
      // A client that leaves mid-handshake is no error to report, as with Node's TLS.
      if (gone.signal.aborted || (err instanceof NativeTlsError && err.peerClosed))
        throw new Error('client closed the connection during TLS handshake')
      throw new PgError('08P01', `TLS handshake failed: ${(err as Error).message}`)
    }
    raw.off('close', onClose)
    const secure = plaintext!.socket
    secure.once('close', () => raw.destroy())
    raw.once('close', () => secure.destroy())
    return plaintext!
  }

/** The configured certificate, with the handshake in C when the native relay runs. */
export function clientTls(config: Config, native: boolean): ClientTls | undefined {
  if (!config.tls) return undefined
  const cert = readFileSync(config.tls.cert)
  const key = readFileSync(config.tls.key)
  const inAddon = native && nativeTlsAvailable
  const start = inAddon
    ? nativeClientTls(nativeTlsContext({ server: true, verify: false, cert, key }))
    : nodeClientTls(tls.createSecureContext({ cert, key }))
  return { start, native: inAddon, certificate: new X509Certificate(cert).raw }
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
