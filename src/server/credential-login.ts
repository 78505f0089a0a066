import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import { md5Response } from '../auth/md5.js'
import { ScramClientExchange } from '../auth/scram.js'
import { readBackendKey, type BackendKey } from '../wire/backend-key.js'
import { decodeErrorFields, PgError } from '../wire/error-response.js'
import {
  passwordMessage,
  saslInitialResponse,
  saslResponse,
  startupMessage,
} from '../wire/messages.js'
import { decodeParameterStatus } from '../wire/parameter-status.js'
import {
  AUTH_CLEARTEXT,
  AUTH_MD5,
  AUTH_OK,
  AUTH_SASL,
  AUTH_SASL_CONTINUE,
  AUTH_SASL_FINAL,
  Backend,
} from '../wire/protocol.js'

/** What a logged-in server connection told pgfence about itself. */
export interface ServerIdentity {
  parameters: Map<string, string>
  /** Its BackendKeyData, to cancel what it runs. */
  backendKey: BackendKey
}

/** The server side of a conversation pgfence conducts itself. */
export interface ServerConversation {
  send(bytes: Buffer): void
  next(): Promise<Buffer>
}

const SCRAM = 'SCRAM-SHA-256'

/** An ErrorResponse from the server as a PgError to pass on to the client. */
export function serverError(message: Buffer): PgError {
  const fields = decodeErrorFields(message)
  return new PgError(
    fields.code ?? 'XX000',
    fields.message ?? 'server error',
    'FATAL',
    fields.detail,
  )
}

/**
 * Logs in as `user` to `database` with the client's credentials, answering whichever method
 * the server asks for; resolves at the server's first ReadyForQuery.
 */
export async function loginUpstream(
  conversation: ServerConversation,
  user: string,
  database: string,
  credentials: UpstreamCredentials,
): Promise<ServerIdentity> {
  conversation.send(
    startupMessage([
      ['user', user],
      ['database', database],
    ]),
  )
  const identity: ServerIdentity = {
    parameters: new Map(),
    backendKey: { processId: 0, secretKey: 0 },
  }
  let scram: ScramClientExchange | null = null
  for (;;) {
    const message = await conversation.next()
    switch (message[0]) {
      case Backend.Authentication:
        scram = answerAuthentication(conversation, message, user, credentials, scram)
        break
      case Backend.ParameterStatus: {
        const { name, value } = decodeParameterStatus(message)
        identity.parameters.set(name, value)
        break
      }
      case Backend.BackendKeyData:
        identity.backendKey = readBackendKey(message)
        break
      case Backend.ErrorResponse:
        throw serverError(message)
      case Backend.ReadyForQuery:
        return identity
    }
  }
}

const missing = (user: string, method: string) =>
  new PgError(
    '28000',
    `pgfence has no credentials to log in to the server as "${user}" with ${method}`,
  )

function answerAuthentication(
  conversation: ServerConversation,
  message: Buffer,
  user: string,
  credentials: UpstreamCredentials,
  scram: ScramClientExchange | null,
): ScramClientExchange | null {
  const code = message.readUInt32BE(5)
  const data = message.subarray(9)
  switch (code) {
    case AUTH_OK:
      return scram
    case AUTH_CLEARTEXT:
      if (credentials.password === undefined) throw missing(user, 'a password')
      conversation.send(passwordMessage(credentials.password))
      return scram
    case AUTH_MD5:
      if (!credentials.md5) throw missing(user, 'md5')
      conversation.send(passwordMessage(md5Response(credentials.md5, data)))
      return scram
    case AUTH_SASL: {
      if (!credentials.scram) throw missing(user, SCRAM)
      if (!data.toString('utf8').split('\0').includes(SCRAM)) throw missing(user, 'SASL')
      const exchange = new ScramClientExchange(credentials.scram)
      conversation.send(saslInitialResponse(SCRAM, exchange.first()))
      return exchange
    }
    case AUTH_SASL_CONTINUE:
      conversation.send(saslResponse(scram!.final(data.toString('utf8'))))
      return scram
    case AUTH_SASL_FINAL:
      if (!scram!.verify(data.toString('utf8')))
        throw new PgError('08006', 'the server could not prove it knows the SCRAM verifier')
      return scram
    default:
      throw new PgError(
        '28000',
        `unsupported authentication method ${code} requested by the server`,
      )
  }
}
