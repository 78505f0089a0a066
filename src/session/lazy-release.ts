import type { Pool } from '../pool/pool.js'
import type { ServerConnection } from '../pool/server-connection.js'
import type { KeptConnectionRelay } from './kept-connection-relay.js'

/** What keeping a connection between transactions needs from its transaction session. */
export interface LazyReleaseOptions {
  pool: Pool
  /** Whether a connection may be kept at all: the native relay carries a kept one. */
  nativeRelay: boolean
  /** The native relay's part, shared with the session. */
  relay: KeptConnectionRelay
  /** Whether the session holds a connection (phase active). */
  holding(): boolean
  /** The connection held. */
  server(): ServerConnection
  /** The JavaScript relay stands between transactions: nothing half sent, expected or queued. */
  atRest(): boolean
  /** Gives the connection back (its settings read back first where they may have changed). */
  release(): void
}

/**
 * Lazy release: at the end of a transaction the session keeps its server connection while no
 * other client waits for one, and from the second such transaction on the native relay carries
 * it (once the JavaScript relay is at rest). When a client starts to wait (the pool calls
 * giveBack) or the settings change, the connection goes back at the end of the transaction then
 * open; under contention every transaction gives its connection back. The session stays in
 * phase active throughout: this adds only whether a giveback is due.
 */
export class LazyRelease {
  /** A client waits for a connection: give the kept one back at the end of the transaction. */
  private giveBackWanted = false
  /** A transaction has ended with the connection kept: the next one kept goes native. */
  private keptBefore = false

  constructor(private readonly options: LazyReleaseOptions) {}

  /**
   * A transaction is over: the connection goes back, or stays when `mayKeep` (no settings to
   * read back, no close pending) and the pool has one to spare for other clients. The native
   * relay carries it from the second time it is kept: a session that ends after its first
   * transaction (a connection per request, as serverless handlers and `pgbench -C` open one)
   * would pay the hand-over to the native relay and back for nothing.
   */
  transactionEnded(mayKeep: boolean): void {
    const { nativeRelay, pool } = this.options
    if (!nativeRelay || !mayKeep || this.giveBackWanted || !pool.hasSpare())
      return this.options.release()
    pool.keep(this.options.server(), this.giveBack)
    if (!this.keptBefore) {
      this.keptBefore = true
      return
    }
    // Not from inside the server socket's read callback: Node reads on after it returns.
    setImmediate(this.relayKept)
  }

  /** A client lent the connection in C with its login keeps it, relayed natively from the start. */
  keptFromStart(): void {
    this.keptBefore = true
    this.options.pool.keep(this.options.server(), this.giveBack)
  }

  /** The connection goes back at the end of this transaction (settings changed natively). */
  giveBackAtEnd(): void {
    this.giveBackWanted = true
    this.options.relay.closeWhenIdle()
  }

  /** The native relay found the session idle, as asked: the kept connection goes back. */
  idle(): void {
    this.options.relay.takeBack()
    this.options.release()
  }

  /** The connection goes back, or the session ends: it is kept no more. */
  released(server: ServerConnection): void {
    this.giveBackWanted = false
    this.options.pool.unkeep(server)
  }

  /** A client waits for a connection: the kept one goes back now if idle, else when it is. */
  readonly giveBack = (): void => {
    const { relay, holding, atRest, release } = this.options
    if (!holding()) return
    this.giveBackWanted = true
    if (relay.active ? relay.closeWhenIdle() && relay.takeBack() : atRest()) release()
  }

  /** The kept connection goes to the native relay once the JavaScript relay is at rest. */
  private readonly relayKept = (): void => {
    const { relay, holding, atRest, server } = this.options
    if (holding() && atRest()) relay.relay(server())
  }
}
