import { PgError } from '../wire/error-response.js'
import { invalidMessageLength } from '../wire/message-queue.js'

/** How a client login in C ended (src/native/client-login.c reports it). */
export const enum LoginOutcome {
  /** Not one it takes (TLS, an md5 entry, a cancel request…): the bytes go to JavaScript. */
  Fallback = 0,
  Authenticated = 1,
  /** A wrong password or a broken exchange: a LoginFailure says which. */
  Refused = 2,
  /** The client left, or its socket failed. */
  Closed = 3,
  /** A connection accepted in C did not complete its startup within limits.startupTimeoutMs. */
  TimedOut = 4,
  /**
   * Authenticated and lent a pool's server connection in C (src/native/login-lend.c): greeted
   * and relayed already.
   */
  Lent = 5,
}

/** Why a client's authentication failed, in C or in JavaScript. */
export const enum LoginFailure {
  WrongProof = 1,
  /** A typed message whose length is out of bounds (the detail: the length). */
  MessageLength = 2,
  /** Not a password message (the detail: its type byte). */
  MessageType = 3,
  Mechanism = 4,
  ClientFirst = 5,
  Nonce = 6,
  ChannelBinding = 7,
  NonceMismatch = 8,
  Proof = 9,
  OutOfMemory = 10,
  /** A client's TLS handshake in C failed (the bytes: OpenSSL's reason). */
  TlsHandshake = 11,
}

/** The words of a broken SCRAM exchange (ScramError's messages). */
export function scramFailureText(failure: LoginFailure): string {
  switch (failure) {
    case LoginFailure.ClientFirst:
      return 'malformed SCRAM message (client-first)'
    case LoginFailure.Nonce:
      return 'malformed SCRAM message (nonce)'
    case LoginFailure.ChannelBinding:
      return 'SCRAM channel binding check failed'
    case LoginFailure.NonceMismatch:
      return 'SCRAM nonce mismatch'
    default:
      return 'malformed SCRAM message (proof)'
  }
}

/** The error a failed authentication sends the client, as PostgreSQL words it. */
export function loginFailureError(failure: LoginFailure, user: string, detail = 0): PgError {
  switch (failure) {
    case LoginFailure.WrongProof:
      return new PgError('28P01', `password authentication failed for user "${user}"`)
    case LoginFailure.MessageLength:
      return invalidMessageLength(detail)
    case LoginFailure.MessageType:
      return new PgError(
        '08P01',
        `expected password response, got message type ${String.fromCharCode(detail)}`,
      )
    case LoginFailure.Mechanism:
      return new PgError('08P01', 'client selected an invalid SASL authentication mechanism')
    case LoginFailure.OutOfMemory:
      return new PgError('53200', 'out of memory')
    default:
      return new PgError('08P01', scramFailureText(failure))
  }
}
