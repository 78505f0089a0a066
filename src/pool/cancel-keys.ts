import { randomBytes } from '../auth/random-block.js'
import { readBackendKey, type BackendKey } from '../wire/backend-key.js'
import { cancelRequest } from '../wire/messages.js'

/** Gives the BackendKeyData of the server connection a client holds now, if any. */
export type HeldServerKey = () => BackendKey | null

/** A CancelRequest's key: process id and secret key after its length and request code. */
const KEY_AT = 8

/** A client's secret key, and what it holds; then another client's of the same process id. */
interface Client {
  secretKey: number
  held: HeldServerKey
  next: Client | null
}

/**
 * Clients of a pool get pgfence's own BackendKeyData (a random process id and secret each);
 * a CancelRequest with it is sent on to the server connection that client holds at that moment.
 * Clients are found by process id and secret: keys issued here never share a process id, but one
 * made in C (a login lent there) may, with its own secret.
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
    this.adopt(key, held)
    return key
  }

  /** Takes a key made elsewhere (in C) for a client. */
  adopt(key: BackendKey, held: HeldServerKey): void {
    const next = this.clients.get(key.processId) ?? null
    this.clients.set(key.processId, { secretKey: key.secretKey, held, next })
  }

  forget(key: BackendKey): void {
    let before: Client | null = null
    for (let client = this.find(key.processId); client; client = client.next) {
      if (client.secretKey !== key.secretKey) {
        before = client
        continue
      }
      if (before) before.next = client.next
      else if (client.next) this.clients.set(key.processId, client.next)
      else this.clients.delete(key.processId)
      return
    }
  }

  /** The CancelRequest to send upstream for a client's request, or null: nothing to cancel. */
  translate(request: Buffer): Buffer | null {
    const { processId, secretKey } = readBackendKey(request, KEY_AT)
    let client = this.find(processId)
    while (client && client.secretKey !== secretKey) client = client.next
    const serverKey = client ? client.held() : null
    return serverKey ? cancelRequest(serverKey) : null
  }

  private find(processId: number): Client | null {
    return this.clients.get(processId) ?? null
  }
}
