import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { performance } from 'node:perf_hooks'
import { setTimeout as delay } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { LeaseLostError, LeaseUnavailableError } from './errors.js'
import { Lease, type Queryable } from './lease.js'
import { LeaseStore } from './lease-store.js'
import { closeOnSignals, stopClosingOnSignals } from './shutdown-signals.js'
import { TokenIssuer, type TokenQueryable } from './token-issuer.js'

export interface LeaseManagerOptions {
  /** Redis URL or an ioredis instance (left open by `close()`). */
  redis: string | Redis
  /** PostgreSQL URL (direct, not through the proxy) or a pg.Pool (left open by `close()`). */
  tokenSource: string | TokenQueryable
  /** Lease TTL in Redis; default 10 s. */
  ttlMs?: number
  /** ε, the assumed clock-rate difference in parts per million; default 1000. */
  driftPpm?: number
  /** The Redis key is keyPrefix + resource; default 'pgfence:lease:'. */
  keyPrefix?: string
  /** SIGTERM/SIGINT release every lease, close, then exit 0; default true. */
  handleSignals?: boolean
}

export interface AcquireOptions {
  /** How long to keep trying while another owner holds the lease; default 0 (one try). */
  waitMs?: number
}

export interface WithLeaseOptions extends AcquireOptions {
  /** Raise the resource's fence on this connection before `work` runs (`lease.raiseFence`). */
  raiseFence?: Queryable
}

/** Pause between tries while waiting for a held lease. */
const retryDelayMs = { min: 10, spread: 40 }

/**
 * Grants leases on named resources: the lease lives in Redis, the fencing token comes from
 * PostgreSQL (`pgfence.next_token()`). Connection errors on its own Redis connection or token
 * pool are emitted as 'connectionError' events; they never throw from a timer.
 */
export class LeaseManager extends EventEmitter {
  private readonly store: LeaseStore
  private readonly tokens: TokenIssuer
  private readonly ttlMs: number
  private readonly driftPpm: number
  private readonly held = new Set<Lease>()
  private closing: Promise<void> | undefined

  constructor(options: LeaseManagerOptions) {
    super()
    this.ttlMs = options.ttlMs ?? 10_000
    this.driftPpm = options.driftPpm ?? 1000
    if (!(this.ttlMs > 0)) throw new RangeError('ttlMs must be positive')
    if (!(this.driftPpm >= 0 && this.driftPpm < 1_000_000)) {
      throw new RangeError('driftPpm must be in [0, 1000000)')
    }
    const onError = (err: Error) => this.emit('connectionError', err)
    this.store = LeaseStore.from(options.redis, options.keyPrefix ?? 'pgfence:lease:', onError)
    this.tokens = TokenIssuer.from(options.tokenSource, onError)
    if (options.handleSignals ?? true) closeOnSignals(this)
  }

  /**
   * Takes the lease, then draws a token. The token is drawn after the key is set, and the grant
   * is only handed out if it is still valid then: every later holder draws its token after this
   * lease ended, so it gets a higher one.
   */
  async acquire(resource: string, options: AcquireOptions = {}): Promise<Lease> {
    if (this.closing) throw new Error('LeaseManager is closed')
    const waitMs = options.waitMs ?? 0
    const owner = randomUUID()
    const startedAt = performance.now()
    for (;;) {
      const sentAt = performance.now()
      if (await this.store.take(resource, owner, this.ttlMs)) {
        return this.grant(resource, owner, sentAt)
      }
      const waitLeft = startedAt + waitMs - performance.now()
      if (waitLeft <= 0) throw new LeaseUnavailableError(resource, waitMs)
      await delay(Math.min(waitLeft, retryDelayMs.min + Math.random() * retryDelayMs.spread))
    }
  }

  /**
   * Acquires, raises the fence first if asked to, runs `work`, and always releases, whatever
   * `work` or the raise does.
   */
  async withLease<T>(
    resource: string,
    work: (lease: Lease) => Promise<T>,
    options: WithLeaseOptions = {},
  ): Promise<T> {
    const lease = await this.acquire(resource, options)
    try {
      if (options.raiseFence) await lease.raiseFence(options.raiseFence)
      return await work(lease)
    } finally {
      await lease.release()
    }
  }

  /** Releases every lease (their signals abort with 'shutdown'), then closes own connections. */
  close(): Promise<void> {
    this.closing ??= this.shutDown()
    return this.closing
  }

  private async shutDown(): Promise<void> {
    stopClosingOnSignals(this)
    try {
      await Promise.all([...this.held].map((lease) => lease.releaseFor('shutdown')))
    } finally {
      await Promise.allSettled([this.store.close(), this.tokens.close()])
    }
  }

  private async grant(resource: string, owner: string, sentAt: number): Promise<Lease> {
    let token: bigint
    try {
      token = await this.tokens.next()
    } catch (err) {
      // The key would expire anyway; the token error is the one worth reporting.
      await this.store.release(resource, owner).catch(() => false)
      throw err
    }
    const lease = new Lease(
      this.store,
      { resource, owner, token, sentAt, ttlMs: this.ttlMs, driftPpm: this.driftPpm },
      (released) => this.held.delete(released),
    )
    if (this.closing) {
      await lease.release()
      throw new Error('LeaseManager is closed')
    }
    if (lease.remainingMs() <= 0) {
      await lease.release()
      throw new LeaseLostError(resource, 'expired', {
        cause: new Error('the token arrived after the lease had expired'),
      })
    }
    this.held.add(lease)
    return lease
  }
}
