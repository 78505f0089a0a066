import { randomBytes } from '../auth/random-block.js'
import { readBackendKey, type BackendKey } from '../wire/backend-key.js'
import { cancelRequest } from '../wire/messages.js'

/** Gives the BackendKeyData of the server connection a client holds now, if any. */
export type HeldServerKey = () => BackendKey | null

/** A CancelRequest's key: process id and secret key after its length and request code. */
const KEY_AT = 8

/** A client's secret key, and what it holds. */
interface Client {
  secretKey: number
  held: HeldServerKey
}

/**
 * Clients of a pool get pgfence's own BackendKeyData (a random process id and secret each);
 * a CancelRequest with it is sent on to the server connection that client holds at that moment.
 * Clients are found by process id, which no two hold at once, and the secret must match.
 */
export class CancelKeys {
  private readonly clients = new Map<number, Client>()

  /** A new key for a client; forget() it when the client leaves. */
  issue(held: HeldServerKey): BackendKey {
    let key: BackendKey
    do {
      const bytes = randomBytes(8)
      bytes[0]! &= 0x7f // a positive process id, as PostgreSQL's
      key = readBackendKey(bytes, 0)
    } while (this.clients.has(key.processId))
    this.clients.set(key.processId, { secretKey: key.secretKey, held })
    return key
  }

  /** Takes a key made elsewhere (in C) for a client; false when its process id is taken. */
  adopt(key: BackendKey, held: HeldServerKey): boolean {
    if (this.clients.has(key.processId)) return false
    this.clients.set(key.processId, { secretKey: key.secretKey, held })
    return true
  }

  forget(key: BackendKey): void {
    if (this.clients.get(key.processId)?.secretKey === key.secretKey)
      this.clients.delete(key.processId)
  }

  /** The CancelRequest to send upstream for a client's request, or null: nothing to cancel. */
  translate(request: Buffer): Buffer | null {
    const { processId, secretKey } = readBackendKey(request, KEY_AT)
    const client = this.clients.get(processId)
    const serverKey = client?.secretKey === secretKey ? client.held() : null
    return serverKey ? cancelRequest(serverKey) : null
  }
}
