import type { UpstreamCredentials } from '../auth/client-authenticator.js'
import type { PoolConfig } from '../config/schema.js'
import type { Logger } from '../log.js'
import { PgError } from '../wire/error-response.js'
import type { ServerConnection } from './server-connection.js'

interface Waiter {
  resolve: (connection: ServerConnection) => void
  reject: (err: Error) => void
  /** Stops its timeout and its watch on the client: it is out of the queue. */
  leave: () => void
  /** performance.now() when the client joined the queue. */
  since: number
}

/** A client that may queue: it leaves the queue when it closes (PgBouncer drops it at once). */
export interface QueuedClient {
  /** Calls `listener` once the client has closed; returns a function that takes it off. */
  onClose(listener: () => void): () => void
}

/** Why a client that closed while it waited got no server connection. */
export const CLIENT_LEFT_QUEUE = 'client left while waiting for a server connection'

/** What a pool reports as it happens: only clients that had to wait cost anything. */
export interface PoolObserver {
  /** A client waited this long in the queue, then got a server connection. */
  waited(seconds: number): void
  /** A client gave up after pool.waitTimeoutMs. */
  timedOut(): void
}

/** A pool's figures at one moment, for metrics and the admin console. */
export interface PoolStats {
  /** Server connections lent to clients (or being reset between them). */
  active: number
  idle: number
  /** Server connections still logging in. */
  login: number
  /** Clients queued for a server connection. */
  waiting: number
  /** How long the first client in the queue has waited, in milliseconds (0: none waits). */
  maxWaitMs: number
}

/** Resets a connection given back, then says whether it may serve another client. */
export type ResetThen = (connection: ServerConnection, done: (reusable: boolean) => void) => void

/**
 * Who may lend a pool's idle connections without the pool (lending in C): offered each that
 * goes idle, and asked for it back before the pool lends or closes it.
 */
export interface IdleLender {
  offer(pool: Pool, connection: ServerConnection): void
  /**
   * Gives the connection back if it holds it; false when it ended meanwhile, or was still being
   * reset (it is ended then).
   */
  withdraw(connection: ServerConnection): boolean
  /** Whether the lender is still resetting the connection (withdraw would end it). */
  resetting(connection: ServerConnection): boolean
  /**
   * Brings the pool up to date with what the lender lent without telling it (a connection it lent
   * shows as lent from then on): called before the pool reads or changes its idle connections.
   */
  settle(): void
  /**
   * Takes in only the connections it lent that came back (idle again from then on); those still
   * lent keep showing as idle. Cheaper than settle, which makes each of those a session.
   */
  takeReturns(): void
}

export type OpenServer = (credentials: UpstreamCredentials) => Promise<ServerConnection>

/** The error a client gets after pool.waitTimeoutMs in the queue (PgBouncer: query_wait_timeout). */
export const waitTimeout = (ms: number) =>
  new PgError(
    '08P01',
    `query_wait_timeout: timeout waiting for a server connection (pool.waitTimeoutMs = ${ms})`,
  )

/**
 * The server connections of one (database, user): at most `size`, opened on demand with the
 * credentials of the latest authenticated client, the most recently used lent first, checked
 * before lending and reset before the next client. Clients wait in a FIFO queue. The settings
 * are read when used, so a reload's take effect (reconfigure() for the size and the sweep).
 */
export class Pool {
  private readonly idle: ServerConnection[] = []
  private readonly waiters: Waiter[] = []
  /**
   * Connections clients keep between transactions (transaction pooling), each with how to ask
   * for it back: when a client queues, or when it has outlived maxLifetimeMs.
   */
  private readonly kept = new Map<ServerConnection, () => void>()
  /** Connections lent, idle, resetting or being opened. */
  private count = 0
  /** Connections being opened (logging in). */
  private opening = 0
  private credentials: UpstreamCredentials | null = null
  private sweeper: NodeJS.Timeout
  private closed = false
  /** The connection that keeps the presence lock through its resets (keepPresenceOn). */
  private presence: ServerConnection | null = null
  /** Offered the idle connections (PoolRegistry sets it). */
  lender: IdleLender | null = null
  /**
   * What the pool's latest new connection reported at its login: a client is greeted with these
   * before it is lent a connection (src/session/pooled-startup.ts). Null until one has opened.
   */
  serverDefaults: ReadonlyMap<string, string> | null = null

  constructor(
    private readonly settings: () => PoolConfig,
    private readonly open: OpenServer,
    private readonly log: Logger,
    private readonly observer: PoolObserver,
  ) {
    this.sweeper = this.startSweeper()
  }

  private get config(): PoolConfig {
    return this.settings()
  }

  private startSweeper(): NodeJS.Timeout {
    const { idleTimeoutMs, maxLifetimeMs } = this.config
    const every = Math.max(50, Math.min(1000, idleTimeoutMs / 2, maxLifetimeMs / 2))
    return setInterval(() => this.sweep(), every).unref()
  }

  /**
   * The settings changed (a reload). Smaller: idle connections beyond the size close, kept ones
   * are asked back, and connections coming back close until the pool is within its size (the
   * clients that hold one keep it). Larger: waiting clients get the new connections at once.
   */
  reconfigure(): void {
    this.lender?.settle()
    if (this.closed) return
    clearInterval(this.sweeper)
    this.sweeper = this.startSweeper()
    while (this.overSize() && this.idle.length > 0) this.discard(this.idle.shift()!)
    if (this.overSize()) for (const giveBack of [...this.kept.values()]) giveBack()
    while (this.waiters.length > 0 && this.count < this.config.size) this.serveWaiter()
  }

  /** More connections than the size allows: a reload made the pool smaller. */
  private overSize(): boolean {
    return this.count > this.config.size
  }

  /** New server connections log in with these (the latest client's, which all work). */
  useCredentials(credentials: UpstreamCredentials): void {
    this.credentials = credentials
  }

  /**
   * `connection` ran the database's check, which took the proxy's presence lock: it keeps the
   * lock through its resets, and the connection that kept it before lets it go at its next one
   * (one holder is enough, and each costs a round trip per reset).
   */
  keepPresenceOn(connection: ServerConnection): void {
    this.lender?.settle()
    if (this.presence) this.presence.holdsPresence = false
    connection.holdsPresence = true
    this.presence = connection
  }

  /** Server connections by state, and clients waiting: what sizing a pool needs. */
  stats(): PoolStats {
    this.lender?.settle()
    const idle = this.idle.length
    const first = this.waiters[0]
    return {
      active: this.count - idle - this.opening,
      idle,
      login: this.opening,
      waiting: this.waiters.length,
      maxWaitMs: first ? performance.now() - first.since : 0,
    }
  }

  /** A server connection for `client`, which queues for one if it must (until it closes). */
  checkout(client?: QueuedClient): Promise<ServerConnection> {
    this.lender?.settle()
    const connection = this.takeIdle()
    if (connection) return Promise.resolve(connection)
    if (this.count < this.config.size) return this.openOne()
    return this.enqueue(client)
  }

  /**
   * An idle connection now, or null (none idle, or clients queue first): transaction pooling
   * takes one per transaction, so the common case costs no promise.
   */
  checkoutIdle(): ServerConnection | null {
    this.lender?.settle()
    return this.waiters.length === 0 ? this.takeIdle() : null
  }

  /** Every server connection is lent: the client queues (FIFO) until one comes back. */
  private enqueue(client?: QueuedClient): Promise<ServerConnection> {
    return new Promise((resolve, reject) => {
      const since = performance.now()
      /** Out of the queue without a connection (unless it was served meanwhile). */
      const giveUp = (err: Error, what: string) => {
        const at = this.waiters.indexOf(waiter)
        if (at < 0) return
        this.waiters.splice(at, 1)
        waiter.leave()
        this.log.info(this.stats(), what)
        reject(err)
      }
      const timer = setTimeout(() => {
        this.observer.timedOut()
        giveUp(
          waitTimeout(this.config.waitTimeoutMs),
          'a client gave up waiting for a server connection',
        )
      }, this.config.waitTimeoutMs)
      const unwatch = client?.onClose(() =>
        giveUp(new Error(CLIENT_LEFT_QUEUE), 'a client left the queue'),
      )
      const waiter: Waiter = {
        resolve: (connection) => {
          this.observer.waited((performance.now() - since) / 1000)
          resolve(connection)
        },
        reject,
        leave: () => {
          clearTimeout(timer)
          unwatch?.()
        },
        since,
      }
      this.waiters.push(waiter)
      this.log.info(this.stats(), 'a client waits for a server connection')
      for (const giveBack of [...this.kept.values()]) giveBack()
    })
  }

  /**
   * Whether another client could take a connection now without waiting (one idle, or room to
   * open one): only then may a client keep its own between transactions at no one's expense.
   */
  hasSpare(): boolean {
    this.lender?.settle()
    return this.waiters.length === 0 && (this.idle.length > 0 || this.count < this.config.size)
  }

  /**
   * A client keeps `connection` between transactions until `giveBack` is called (it then gives
   * it back at its next idle point) or it calls unkeep.
   */
  keep(connection: ServerConnection, giveBack: () => void): void {
    this.kept.set(connection, giveBack)
  }

  unkeep(connection: ServerConnection): void {
    this.kept.delete(connection)
  }

  /**
   * A client is done with its connection: once `reset` says it is clean, lend it to the next
   * waiter or keep it idle; else close it.
   */
  release(connection: ServerConnection, reset: ResetThen): void {
    if (this.worn(connection)) return this.discard(connection)
    reset(connection, (reusable) =>
      reusable ? this.checkin(connection) : this.discard(connection),
    )
  }

  /** A connection that needs no reset comes back, at once: to the next waiter, else idle. */
  checkin(connection: ServerConnection): void {
    if (this.worn(connection) || this.closed || this.overSize()) return this.discard(connection)
    const waiter = this.waiters.shift()
    if (waiter) {
      waiter.leave()
      return waiter.resolve(connection)
    }
    connection.idleSince = Date.now()
    this.idle.push(connection)
    this.lender?.offer(this, connection)
  }

  /**
   * A connection the lender lent comes back idle to it at once, its reset under way there (lending
   * in C): only when no client waits for one and it may serve another; else false, and it comes
   * back through release.
   */
  takeBack(connection: ServerConnection): boolean {
    if (this.waiters.length > 0 || this.closed || this.overSize()) return false
    if (this.worn(connection)) return false
    connection.idleSince = Date.now()
    this.idle.push(connection)
    return true
  }

  /** Whether `connection` is idle here now. */
  holdsIdle(connection: ServerConnection): boolean {
    return this.idle.lastIndexOf(connection) >= 0
  }

  /** The lender lent an idle connection: a client holds it now, as if checked out. */
  lentOutside(connection: ServerConnection): void {
    const at = this.idle.lastIndexOf(connection)
    if (at >= 0) this.idle.splice(at, 1)
  }

  /** How long the connection may still be lent before maxLifetimeMs closes it. */
  lifetimeLeftMs(connection: ServerConnection): number {
    return this.config.maxLifetimeMs - (Date.now() - connection.createdAt)
  }

  close(): void {
    this.lender?.settle()
    this.closed = true
    clearInterval(this.sweeper)
    for (const connection of this.idle.splice(0)) this.discard(connection)
    for (const waiter of this.waiters.splice(0)) {
      waiter.leave()
      waiter.reject(new PgError('57P01', 'terminating connection due to administrator command'))
    }
  }

  private takeIdle(): ServerConnection | null {
    for (let at = this.readyIdleAt(); at >= 0; at = this.readyIdleAt()) {
      const connection = this.idle.splice(at, 1)[0]!
      const withdrawn = this.lender?.withdraw(connection) ?? true
      if (withdrawn && !this.worn(connection)) return connection
      this.discard(connection)
    }
    return null
  }

  /**
   * Where the most recently used idle connection is; one the lender is still resetting (a client
   * lent it in C just left) only when no other is idle and none can be opened, since taking it
   * ends it. -1: none to take.
   */
  private readyIdleAt(): number {
    const { idle, lender } = this
    for (let i = idle.length - 1; i >= 0; i--) if (!lender?.resetting(idle[i]!)) return i
    return this.count < this.config.size ? -1 : idle.length - 1
  }

  private async openOne(): Promise<ServerConnection> {
    if (!this.credentials) throw new PgError('08006', 'no credentials to open a server connection')
    this.count++
    this.opening++
    try {
      const connection = await this.open(this.credentials)
      this.serverDefaults = connection.own
      return connection
    } catch (err) {
      this.count--
      this.serveWaiter()
      throw err
    } finally {
      this.opening--
    }
  }

  /** A slot came free: open a connection for the first waiter, if any, within the size. */
  private serveWaiter(): void {
    if (this.count >= this.config.size) return
    const waiter = this.waiters.shift()
    if (!waiter) return
    waiter.leave()
    this.openOne().then(waiter.resolve, waiter.reject)
  }

  private discard(connection: ServerConnection): void {
    this.lender?.withdraw(connection)
    connection.destroy()
    if (this.presence === connection) this.presence = null
    this.count--
    if (!this.closed) this.serveWaiter()
  }

  private expired(connection: ServerConnection): boolean {
    return Date.now() - connection.createdAt >= this.config.maxLifetimeMs
  }

  /** Past maxLifetimeMs, or ended (its node no longer the primary, its server gone). */
  private worn(connection: ServerConnection): boolean {
    return this.expired(connection) || !connection.alive
  }

  /** Idle past idleTimeoutMs at `now`, or worn. */
  private closable(connection: ServerConnection, now: number): boolean {
    return now - connection.idleSince >= this.config.idleTimeoutMs || this.worn(connection)
  }

  /**
   * Whether a sweep at `now` may close or open a connection. Those lent without the pool count as
   * idle here, so minIdle (which they could fall short of) always sweeps.
   */
  private due(now: number): boolean {
    if (this.config.minIdle > 0) return true
    for (const connection of this.kept.keys()) if (this.worn(connection)) return true
    return this.idle.some((connection) => this.closable(connection, now))
  }

  /**
   * Closes connections idle too long, too old or to a node no longer the primary (asks for kept
   * ones back), then opens up to minIdle.
   */
  sweep(): void {
    // What the lender lent is settled only when the sweep has something to do: settling makes a
    // session of each connection lent at that moment, for the rest of its client's stay.
    this.lender?.takeReturns()
    const now = Date.now()
    if (!this.due(now)) return
    this.lender?.settle()
    for (const [connection, giveBack] of [...this.kept]) if (this.worn(connection)) giveBack()
    for (let i = this.idle.length - 1; i >= 0; i--) {
      const connection = this.idle[i]!
      if (this.closable(connection, now)) {
        this.idle.splice(i, 1)
        this.discard(connection)
      }
    }
    const missing = Math.min(this.config.minIdle - this.idle.length, this.config.size - this.count)
    for (let i = 0; i < missing && this.credentials; i++) {
      this.openOne().then(
        (connection) => this.checkin(connection),
        (err) =>
          this.log.warn(
            { err: (err as Error).message },
            'could not open an idle server connection',
          ),
      )
    }
  }
}
