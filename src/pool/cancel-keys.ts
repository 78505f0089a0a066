import { randomBytes } from '../auth/random-block.js'
import { CANCEL_REQUEST_CODE, CANCEL_REQUEST_LENGTH } from '../wire/protocol.js'

/** Gives the BackendKeyData of the server connection a client holds now, if any. */
export type HeldServerKey = () => Buffer | null

/**
 * Clients of a pool get pgfence's own BackendKeyData (a random process id and secret each);
 * a CancelRequest with it is sent on to the server connection that client holds at that moment.
 */
export class CancelKeys {
  private readonly clients = new Map<string, HeldServerKey>()

  /** A new key for a client; forget() it when the client leaves. */
  issue(held: HeldServerKey): Buffer {
    let key: Buffer
    do {
      key = randomBytes(8)
      key[0]! &= 0x7f // a positive process id, as PostgreSQL's
    } while (this.clients.has(key.toString('hex')))
    this.clients.set(key.toString('hex'), held)
    return key
  }

  forget(key: Buffer): void {
    this.clients.delete(key.toString('hex'))
  }

  /** The CancelRequest to send upstream for a client's request, or null: nothing to cancel. */
  translate(request: Buffer): Buffer | null {
    const serverKey = this.clients.get(request.toString('hex', 8, 16))?.()
    if (!serverKey) return null
    const forwarded = Buffer.allocUnsafe(CANCEL_REQUEST_LENGTH)
    forwarded.writeUInt32BE(CANCEL_REQUEST_LENGTH, 0)
    forwarded.writeUInt32BE(CANCEL_REQUEST_CODE, 4)
    serverKey.copy(forwarded, 8)
    return forwarded
  }
}
