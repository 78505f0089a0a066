import type net from 'node:net'
import tls from 'node:tls'
import { PgError } from '../wire/error-response.js'
import { SSL_ACCEPTED, SSL_REFUSED } from '../wire/protocol.js'
import { decodeStartupPacket, type StartupPacket } from '../wire/startup-packet.js'
import { StartupReader } from './startup-reader.js'
import { ClientConnection } from './client-connection.js'

export type Handshake =
  | {
      kind: 'startup'
      /** The client, inside TLS if it asked for it. */
      connection: ClientConnection
      packet: Extract<StartupPacket, { kind: 'startup' }>
      /** Bytes the client sent after its StartupMessage, to be relayed first. */
      leftover: Buffer
    }
  | { kind: 'cancel'; bytes: Buffer }

export interface StartupOptions {
  /** Bytes the client sent that were read already (by the login in C); the socket reads on. */
  received?: Buffer
  /** The connection is inside TLS already: an encryption request is refused. */
  encrypted?: boolean
}

export type StartupHandshake = Extract<Handshake, { kind: 'startup' }>

/** The answer to an encryption request pgfence takes up: TLS follows. */
export const ANSWER_YES = Buffer.from([SSL_ACCEPTED])
/** The answer to an encryption request pgfence does not take up: go on in plaintext. */
export const ANSWER_NO = Buffer.from([SSL_REFUSED])

/** A failed TLS handshake with a client, with the TLS library's reason. */
export const tlsHandshakeFailed = (reason: string) =>
  new PgError('08P01', `TLS handshake failed: ${reason}`)

/** Runs the server side of a TLS handshake on a client's socket: the connection to speak on next. */
export type StartClientTls = (raw: net.Socket) => Promise<ClientConnection>

/**
 * Runs the client's side of the startup: encryption requests (TLS when configured, GSS never),
 * then the StartupMessage or a CancelRequest.
 */
export async function runStartupHandshake(
  raw: ClientConnection,
  startTls: StartClientTls | undefined,
  /** Told when the conversation moves into TLS, so errors are sent on the right layer. */
  onEncrypted: (socket: net.Socket) => void,
  { received, encrypted: inside = false }: StartupOptions = {},
): Promise<Handshake> {
  let connection = raw
  let reader = new StartupReader(connection)
  if (received) {
    connection.receive(received)
    connection.socket.resume()
  }
  let encrypted = inside
  for (;;) {
    const packet = decodeStartupPacket(await reader.next())
    if (packet.kind === 'cancel') {
      reader.detach()
      return packet
    }
    if (packet.kind === 'startup') {
      reader.detach()
      return { kind: 'startup', connection, packet, leftover: reader.leftover }
    }
    if (encrypted) throw new PgError('08P01', 'unexpected encryption request after encryption')
    // Bytes sent before our answer would be read as if they had been encrypted (CVE-2021-23214).
    if (reader.leftover.length > 0) {
      throw new PgError('08P01', 'received unencrypted data after SSL request')
    }
    if (packet.kind === 'ssl' && startTls) {
      reader.detach()
      raw.release()
      // Flushed before the handshake: a native one takes the descriptor over.
      await new Promise((resolve) => raw.socket.write(ANSWER_YES, resolve))
      connection = await startTls(raw.socket as net.Socket)
      onEncrypted(connection.socket)
      reader = new StartupReader(connection)
      encrypted = true
    } else {
      connection.socket.write(ANSWER_NO)
    }
  }
}

/** The handshake in Node's TLSSocket. */
export const nodeClientTls =
  (secureContext: tls.SecureContext): StartClientTls =>
  async (raw) =>
    ClientConnection.fromDataEvents(await startServerTls(raw, secureContext))

function startServerTls(raw: net.Socket, secureContext: tls.SecureContext): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const secure = new tls.TLSSocket(raw, { isServer: true, secureContext })
    const onError = (err: Error) => reject(tlsHandshakeFailed(err.message))
    // A client that leaves mid-handshake may raise no error: the close settles it.
    const onClose = () => reject(new Error('client closed the connection during TLS handshake'))
    secure.once('secure', () => {
      secure.off('error', onError)
      secure.off('close', onClose)
      resolve(secure)
    })
    secure.once('error', onError)
    secure.once('close', onClose)
    raw.resume()
  })
}
