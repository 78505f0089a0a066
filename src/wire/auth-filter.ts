import { authenticationSasl } from './messages.js'
import { EVERY_TYPE, FROM_SERVER, MessageFramer } from './message-framer.js'
import { AUTH_SASL, Backend } from './protocol.js'

const CHANNEL_BINDING = 'SCRAM-SHA-256-PLUS'

/**
 * Reads the server's startup-phase messages (authentication up to the first ReadyForQuery).
 * Channel binding (tls-server-end-point) binds to the certificate the client sees, which is the
 * proxy's: unless the proxy presents the server's own certificate, SCRAM-SHA-256-PLUS is removed
 * from the mechanisms the server offers.
 */
export class AuthPhaseFilter {
  private readonly framer: MessageFramer
  /** The messages framed out of the current chunk. */
  private forward: Buffer[] = []
  private ready = false

  constructor(private readonly keepChannelBinding = false) {
    this.framer = new MessageFramer(
      {
        forward: () => {},
        intercept: (message) => this.read(message),
        // The client is told, as by the server: an ErrorResponse ends the login.
        fail: (error) => void this.forward.push(error.encode()),
      },
      Infinity,
      EVERY_TYPE,
      FROM_SERVER,
    )
  }

  /**
   * Returns the bytes to forward (views of the chunk, or copies of messages that came in pieces)
   * and, once ReadyForQuery has passed, the session's first bytes (everything after it) as
   * `rest`.
   */
  push(chunk: Buffer): { forward: Buffer[]; rest: Buffer | null } {
    const framed = this.framer.push(chunk)
    const forward = this.forward
    this.forward = []
    return { forward, rest: this.ready ? chunk.subarray(framed) : null }
  }

  private read(message: Buffer): void {
    this.forward.push(this.keepChannelBinding ? message : withoutChannelBinding(message))
    if (message[0] !== Backend.ReadyForQuery) return
    this.ready = true
    this.framer.stop()
  }
}

function withoutChannelBinding(message: Buffer): Buffer {
  if (message[0] !== Backend.Authentication || message.readUInt32BE(5) !== AUTH_SASL) return message
  const mechanisms = message
    .toString('utf8', 9, message.length)
    .split('\0')
    .filter((name) => name !== '' && name !== CHANNEL_BINDING)
  return authenticationSasl(mechanisms)
}
