import { randomBytes } from '../auth/random-block.js'
import { readBackendKey, type BackendKey } from '../wire/backend-key.js'
import { cancelRequest } from '../wire/messages.js'

/** Gives the BackendKeyData of the server connection a client holds now, if any. */
export type HeldServerKey = () => BackendKey | null

/** A CancelRequest's key: process id and secret key after its length and request code. */
const KEY_AT = 8

const mapKey = (key: BackendKey) => `${key.processId}:${key.secretKey}`

/**
 * Clients of a pool get pgfence's own BackendKeyData (a random process id and secret each);
 * a CancelRequest with it is sent on to the server connection that client holds at that moment.
 */
export class CancelKeys {
  private readonly clients = new Map<string, HeldServerKey>()

  /** A new key for a client; forget() it when the client leaves. */
  issue(held: HeldServerKey): BackendKey {
    let key: BackendKey
    let name: string
    do {
      const bytes = randomBytes(8)
      bytes[0]! &= 0x7f // a positive process id, as PostgreSQL's
      key = readBackendKey(bytes, 0)
      name = mapKey(key)
    } while (this.clients.has(name))
    this.clients.set(name, held)
    return key
  }

  forget(key: BackendKey): void {
    this.clients.delete(mapKey(key))
  }

  /** The CancelRequest to send upstream for a client's request, or null: nothing to cancel. */
  translate(request: Buffer): Buffer | null {
    const serverKey = this.clients.get(mapKey(readBackendKey(request, KEY_AT)))?.()
    return serverKey ? cancelRequest(serverKey) : null
  }
}
