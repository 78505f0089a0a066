import type net from 'node:net'
import type { ClientConnection } from '../client/client-connection.js'
import type { PgError } from '../wire/error-response.js'
import type { SessionState } from './session.js'
import type { TimedSession } from './session-timeouts.js'
import type { UpstreamNode } from '../upstream/upstream-node.js'
import { ChurnSet } from '../churn-set.js'

/** What metrics, the console, timeouts, reloads and shutdown need of a session of any mode. */
export interface RegisteredSession extends TimedSession {
  readonly closed: Promise<void>
  readonly relayedNatively: boolean
  state(): SessionState
  closeWhenIdle(error: PgError): void
  reconfigure(): void
}

/** What the console and metrics show of one session. */
export interface SessionEntry {
  id: number
  user: string
  database: string
  /** The client's address, or the Unix socket path (looked up when first asked). */
  peer(): string
  connectedAt: Date
  /** The node of the server connection the session holds now (null: none held). */
  serverNode(): UpstreamNode | null
}

/**
 * The proxy's open connections and sessions, with the figures metrics and the admin console read
 * from them (computed when asked, never on the data path).
 */
export class SessionRegistry {
  /** Every client connection JavaScript holds, from accept (or its login in C's end) to close. */
  readonly connections = new ChurnSet<ClientConnection>()
  /** Connections accepted in C whose login is under way there (src/auth/native-accept.ts). */
  loginsInC: () => number = () => 0
  /**
   * Reports the logins lent in C that JavaScript has not heard of (LendingInC.settle): each
   * becomes a session here. Called before the sessions are read.
   */
  settle: () => void = () => {}
  private readonly open = new ChurnSet<[RegisteredSession, SessionEntry]>()
  /** Client sockets that use the admin console. */
  readonly consoles = new Set<net.Socket>()
  /** Transactions of sessions that have ended. */
  private endedTransactions = 0

  /** Enters a session; returns what takes it out at its end, after `transactions`. */
  add(session: RegisteredSession, entry: SessionEntry): (transactions: number) => void {
    const remove = this.open.add([session, entry])
    return (transactions) => {
      this.ended(transactions)
      remove()
    }
  }

  /** Counts the transactions of a session that ended (one never entered: a quiet lease's). */
  ended(transactions: number): void {
    this.endedTransactions += transactions
  }

  /** Each session open now, with what the console shows of it. */
  get sessions(): ChurnSet<[RegisteredSession, SessionEntry]> {
    this.settle()
    return this.open
  }

  /** Every client connection open now, those still in their login in C included. */
  clientCount(): number {
    return this.connections.size + this.loginsInC()
  }

  /** The sessions open now, each time it is iterated. */
  *[Symbol.iterator](): Iterator<RegisteredSession> {
    for (const [session] of this.sessions) yield session
  }

  transactions(): number {
    let total = this.endedTransactions
    for (const session of this) total += session.state().transactions
    return total
  }

  nativeRelaySessions(): number {
    return [...this].filter((session) => session.relayedNatively).length
  }

  clientConnections(): Record<string, number> {
    const states: Record<string, number> = { startup: 0, idle: 0, active: 0, in_transaction: 0 }
    for (const session of this) states[clientState(session)]! += 1
    states.startup! += this.clientCount() - this.sessions.size - this.consoles.size
    states.admin = this.consoles.size
    return states
  }

  serverConnections(): Record<string, number> {
    const states: Record<string, number> = { login: 0, active: 0 }
    for (const session of this) states[session.state().ready ? 'active' : 'login']! += 1
    return states
  }

  /** The sessions whose server connection is on `node`. */
  *on(node: UpstreamNode): Iterable<RegisteredSession> {
    for (const [session, entry] of this.sessions) if (entry.serverNode() === node) yield session
  }

  /** Client sessions per (database, user), keyed by poolKey. */
  clientsByPool(): Map<string, PoolClients> {
    const pools = new Map<string, PoolClients>()
    for (const [, { database, user }] of this.sessions) {
      const key = poolKey(database, user)
      const pool = pools.get(key) ?? { database, user, clients: 0 }
      pool.clients++
      pools.set(key, pool)
    }
    return pools
  }
}

export interface PoolClients {
  database: string
  user: string
  clients: number
}

export const poolKey = (database: string, user: string): string => `${database}\0${user}`

/** A session's state as metrics and the console's SHOW CLIENTS name it. */
export function clientState(
  session: RegisteredSession,
): 'startup' | 'idle' | 'active' | 'in_transaction' {
  const state = session.state()
  if (!state.ready) return 'startup'
  if (state.idle) return 'idle'
  return state.inTransaction ? 'in_transaction' : 'active'
}
