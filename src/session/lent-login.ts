import type { NativeRelay, RelayCallbacks, RelayEnd } from '../relay/native-relay.js'
import type { LinkEventHandler } from '../relay/server-link.js'
import type { RequestProgress } from '../relay/request-progress.js'
import type { BackendKey } from '../wire/backend-key.js'
import type { PgError } from '../wire/error-response.js'
import { TransactionStatus } from '../wire/protocol.js'
import type { CutReason } from './cut-outcome.js'
import type { RegisteredSession } from './session-registry.js'
import type { SessionState } from './session.js'

/** The session a lent login becomes once JavaScript must take part, with its relay callbacks. */
export interface MadeSession {
  session: RegisteredSession
  callbacks: RelayCallbacks
  /** A transaction pool's: a client waits, the connection goes back at the transaction's end. */
  giveBack?(): void
}

export interface LentLoginOptions {
  /** The relay C made at the login, which carries the client until a session is made. */
  relay: NativeRelay
  /** A transaction pool's: a statement under way holds a connection, as a transaction does. */
  busyInTransaction: boolean
  /** Makes the session, as lending in C would have started it at the login. */
  make(): MadeSession
  /**
   * The client said goodbye between transactions: its connection goes back on the shelf in C for
   * the next client to get `key` (what C tells of the link's end from then on), or null when it
   * comes back through the pool, which the session then does.
   */
  backOnShelf(key: BackendKey): LinkEventHandler | null
  /** The login ended, after `transactions` (its session's, when one was made). */
  ended(transactions: number): void
}

/**
 * A client lent a connection in C (lending in C) once JavaScript heard of it, as JavaScript holds
 * it until it must take part (C reports a login lent quietly only when it must: LendingInC.settle):
 * no session is made while the native relay carries the client and the console, metrics and
 * timeouts only read where it stands. The session is made (and takes over) at the first message
 * the relay hands to JavaScript, an end other than a clean goodbye, or anything asked of it (a
 * reload, a shutdown, a pool wanting the connection, a timeout's cut). A login that says goodbye
 * first never needs one: its connection goes back on the shelf in C as its session's would.
 * Making a session, its relay, timers and registrations costs a short login more than the rest of
 * its work in JavaScript.
 */
export class LentLogin implements RegisteredSession {
  private made: MadeSession | null = null
  private over = false
  private closing: Promise<void> | null = null
  private markClosed: (() => void) | null = null

  constructor(private readonly options: LentLoginOptions) {}

  /** The relay's callbacks: each hands over to the session, made first, but a clean goodbye. */
  callbacks(): RelayCallbacks {
    return [
      (message) => this.session().callbacks[0](message),
      (message) => this.session().callbacks[1](message),
      (kind, detail, processId, secretKey, transactions) =>
        this.onClose(kind, detail, processId, secretKey, transactions),
    ]
  }

  get closed(): Promise<void> {
    if (this.made) return this.made.session.closed
    if (this.over) return Promise.resolve()
    return (this.closing ??= new Promise((resolve) => (this.markClosed = resolve)))
  }

  get relayedNatively(): boolean {
    return this.made ? this.made.session.relayedNatively : !this.over
  }

  state(): SessionState {
    if (this.made) return this.made.session.state()
    const { transactions, outstanding, status } = this.options.relay.progress()
    const block = status !== TransactionStatus.Idle
    const inTransaction = block || (outstanding > 0 && this.options.busyInTransaction)
    return { transactions, ready: true, idle: outstanding === 0 && !block, inTransaction }
  }

  progress(): RequestProgress | null {
    if (this.made) return this.made.session.progress()
    return this.over ? null : this.options.relay.progress()
  }

  cut(reason: CutReason): Promise<void> {
    return this.over ? Promise.resolve() : this.session().session.cut(reason)
  }

  closeWhenIdle(error: PgError): void {
    if (!this.over) this.session().session.closeWhenIdle(error)
  }

  reconfigure(): void {
    if (!this.over) this.session().session.reconfigure()
  }

  /** The session, made now if it was not: from here on it holds the client. */
  session(): MadeSession {
    if (this.made) return this.made
    const made = (this.made = this.options.make())
    void made.session.closed.then(() => this.options.ended(made.session.state().transactions))
    if (this.markClosed) void made.session.closed.then(this.markClosed)
    return made
  }

  private onClose(
    kind: RelayEnd,
    detail?: string,
    processId?: number,
    secretKey?: number,
    transactions = 0,
  ): LinkEventHandler | void {
    if (!this.made && kind === 'goodbye' && processId !== undefined) {
      const onShelf = this.options.backOnShelf({ processId, secretKey: secretKey! })
      if (onShelf) {
        this.over = true
        this.options.ended(transactions)
        this.markClosed?.()
        return onShelf
      }
    }
    return this.session().callbacks[2](kind, detail, processId, secretKey)
  }
}
