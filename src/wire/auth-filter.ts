import { authenticationSasl } from './messages.js'
import { AUTH_SASL, Backend, HEADER_BYTES } from './protocol.js'

const CHANNEL_BINDING = 'SCRAM-SHA-256-PLUS'

/**
 * Reads the server's startup-phase messages (authentication up to the first ReadyForQuery).
 * Channel binding (tls-server-end-point) binds to the certificate the client sees, which is the
 * proxy's: unless the proxy presents the server's own certificate, SCRAM-SHA-256-PLUS is removed
 * from the mechanisms the server offers.
 */
export class AuthPhaseFilter {
  private pending: Buffer = Buffer.alloc(0)

  constructor(private readonly keepChannelBinding = false) {}

  /**
   * Returns the bytes to forward and, once ReadyForQuery has passed, the session's first bytes
   * (everything after it) as `rest`.
   */
  push(chunk: Buffer): { forward: Buffer[]; rest: Buffer | null } {
    const buffered = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk])
    const forward: Buffer[] = []
    let pos = 0
    while (buffered.length - pos >= HEADER_BYTES) {
      const total = buffered.readUInt32BE(pos + 1) + 1
      if (buffered.length - pos < total) break
      const message = buffered.subarray(pos, pos + total)
      forward.push(this.keepChannelBinding ? message : withoutChannelBinding(message))
      pos += total
      if (message[0] === Backend.ReadyForQuery) return { forward, rest: buffered.subarray(pos) }
    }
    this.pending = Buffer.from(buffered.subarray(pos))
    return { forward, rest: null }
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
