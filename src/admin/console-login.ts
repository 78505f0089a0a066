import { authenticateConnection } from '../auth/connection-login.js'
import type { CredentialSource } from '../auth/credential-source.js'
import type { Config } from '../config/schema.js'
import type { ClientConnection } from '../client/client-connection.js'
import type { StartupHandshake } from '../client/startup-handshake.js'
import { connectUpstream, type UpstreamSocket } from '../server/upstream-connector.js'
import { AuthPhaseFilter } from '../wire/auth-filter.js'
import { Backend } from '../wire/protocol.js'
import { decodeErrorFields } from '../wire/error-response.js'

const AUTH_OK = 0
const UNDEFINED_DATABASE = '3D000'
/** Where auth.query looks a console user up: database pgfence exists only in pgfence. */
const LOOKUP_DATABASE = 'postgres'

/**
 * Checks a console client's login and sends it AuthenticationOk. Resolves true once accepted;
 * a refusal either resolves false after it was sent or rejects with the PgError to send.
 */
export type ConsoleLogin = (handshake: StartupHandshake) => Promise<boolean>

/**
 * The console authenticates as a client of the proxy would: with pgfence's own credentials
 * (auth.file, auth.query) when it pools, so that no password gets in that the pool refuses and
 * auth.file logins need no upstream; by PostgreSQL itself in pool.mode none (`credentials` null).
 */
export function consoleLogin(
  upstream: Config['upstream'],
  credentials: CredentialSource | null,
): ConsoleLogin {
  if (!credentials)
    return ({ connection, packet, leftover }) =>
      loginThroughUpstream(upstream, connection, packet.bytes, leftover)
  return async ({ connection, packet }) => {
    const login = await authenticateConnection(
      connection,
      packet.params.get('user')!,
      LOOKUP_DATABASE,
      credentials,
    )
    connection.socket.write(login.answer)
    return true
  }
}

/**
 * Authenticates an admin console user as PostgreSQL would, since pgfence knows no password in
 * pool.mode none: the login is passed through to the upstream, as that user and for database
 * pgfence, until PostgreSQL has checked the password and the role; the upstream connection is
 * then closed. Resolves true once PostgreSQL accepted the login (the client has been sent
 * AuthenticationOk), false after the server's refusal was passed on or either side closed.
 */
export async function loginThroughUpstream(
  upstreamConfig: Config['upstream'],
  client: ClientConnection,
  startupPacket: Buffer,
  leftover: Buffer,
): Promise<boolean> {
  const filter = new AuthPhaseFilter(false)
  let resolve!: (authenticated: boolean) => void
  const outcome = new Promise<boolean>((done) => (resolve = done))
  // The server says more after AuthenticationOk (it may not even have the database): unheard.
  const settle = (accepted: boolean, refusal?: Buffer) => {
    if (settled) return
    settled = true
    if (refusal) client.socket.write(Buffer.from(refusal))
    resolve(accepted)
  }
  let settled = false
  let authenticated = false
  const fromServer = (chunk: Buffer): boolean => {
    for (const message of filter.push(chunk).forward) {
      if (settled) break
      const type = message[0]
      if (type === Backend.ErrorResponse) {
        // After AuthenticationOk PostgreSQL checks the role, then the database: a missing
        // database means the login itself was good.
        if (authenticated && decodeErrorFields(message).code === UNDEFINED_DATABASE) settle(true)
        else settle(false, message)
      } else if (authenticated) {
        if (type === Backend.ReadyForQuery) settle(true)
      } else {
        // Copied: the chunk may be a view of a read buffer that is reused.
        client.socket.write(Buffer.from(message))
        authenticated = type === Backend.Authentication && message.readUInt32BE(5) === AUTH_OK
      }
    }
    return true
  }
  const upstream: UpstreamSocket = await connectUpstream(upstreamConfig, fromServer)
  upstream.on('error', () => settle(false))
  upstream.on('close', () => settle(false))
  client.socket.once('close', () => settle(false))
  client.setReceiver((chunk) => upstream.write(Buffer.from(chunk)) || true)
  upstream.write(startupPacket)
  if (leftover.length > 0) upstream.write(leftover)
  client.socket.resume()
  const accepted = await outcome
  upstream.destroy()
  client.setReceiver(() => false)
  return accepted
}
