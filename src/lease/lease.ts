import { performance } from 'node:perf_hooks'
import { quoteLiteral } from '../rewrite/sql-text.js'
import { answerWithin } from './answer-within.js'
import { LeaseLostError, type LeaseEndReason } from './errors.js'
import type { LeaseStore } from './lease-store.js'
import { validityMs } from './validity.js'
import { tokenTimeline } from '../schema/token-layout.js'

/** Anything that runs SQL text: pg.Client, pg.Pool, pg.PoolClient and the like. */
export interface Queryable {
  query(text: string): unknown
}

export interface LeaseGrant {
  resource: string
  owner: string
  token: bigint
  /** `performance.now()` when the acquire request was sent. */
  sentAt: number
  ttlMs: number
  driftPpm: number
}

/**
 * A held lease. It renews itself every ttl/3 and aborts `signal` as soon as it is lost (another
 * owner, or a renewal without an ack within ttl/3), expires locally, is released, the manager
 * shuts down, or a failover of the token source invalidated its token (seen at a renewal). Renewal failures surface as the abort reason's `cause`, never as a thrown error.
 */
export class Lease {
  readonly resource: string
  readonly token: bigint
  private readonly owner: string
  private readonly ttlMs: number
  private readonly validForMs: number
  private readonly renewEveryMs: number
  private readonly controller = new AbortController()
  private validUntil: number
  private renewTimer: NodeJS.Timeout | undefined
  private expiryTimer: NodeJS.Timeout | undefined

  /** @internal Created by LeaseManager.acquire. */
  constructor(
    private readonly store: LeaseStore,
    grant: LeaseGrant,
    private readonly onReleased: (lease: Lease) => void,
    /** The token source's timeline now, asked at each renewal. */
    private readonly timelineNow: () => Promise<number>,
  ) {
    this.resource = grant.resource
    this.owner = grant.owner
    this.token = grant.token
    this.ttlMs = grant.ttlMs
    this.validForMs = validityMs(grant.ttlMs, grant.driftPpm)
    this.renewEveryMs = grant.ttlMs / 3
    this.validUntil = grant.sentAt + this.validForMs
    this.scheduleRenewal(grant.sentAt)
    this.scheduleExpiryCheck()
  }

  get signal(): AbortSignal {
    return this.controller.signal
  }

  /** Milliseconds left to act, read from the monotonic clock on every call; ≤ 0 once over. */
  remainingMs(): number {
    const left = this.validUntil - performance.now()
    return this.controller.signal.aborted ? Math.min(0, left) : left
  }

  /**
   * Presents this lease on a connection for the rest of its session: `SET app.fencing_token =
   * <token>` and `SET app.fencing_resource = '<resource>'`, for row fences and resource fences
   * alike. On a pooled connection the settings stay for the next borrower: prefer
   * applyToTransaction there.
   */
  async applyTo(client: Queryable): Promise<void> {
    await client.query(
      `SET app.fencing_token = ${this.token}; SET app.fencing_resource = ${quoteLiteral(this.resource)}`,
    )
  }

  /**
   * Presents this lease for the current transaction only (call it after BEGIN): the settings end
   * with the transaction, committed or rolled back, so they cannot leak through a pool. Runs
   * transactionSql().
   */
  async applyToTransaction(client: Queryable): Promise<void> {
    await client.query(this.transactionSql())
  }

  /**
   * The one statement that presents this lease for the current transaction, for an ORM's own
   * transaction object (`trx.raw(lease.transactionSql())`...): `SELECT set_config(…, true)` for
   * the token and the resource. One statement, so it also runs as a prepared statement.
   */
  transactionSql(): string {
    return `SELECT pg_catalog.set_config('app.fencing_token', '${this.token}', true), pg_catalog.set_config('app.fencing_resource', ${quoteLiteral(this.resource)}, true)`
  }

  /**
   * Raises the resource's fence to this lease's token (`pgfence.raise_fence`): a new holder's
   * first act. It waits for an older holder's open transaction on the resource, and every later
   * write of an older holder to the resource's tables is refused. Rejects with PF409 when a
   * newer holder already raised it.
   */
  async raiseFence(client: Queryable): Promise<void> {
    await client.query(`SELECT pgfence.raise_fence(${quoteLiteral(this.resource)}, ${this.token})`)
  }

  /** Ends the lease and deletes its key if still its own; false when another owner holds it. */
  release(): Promise<boolean> {
    return this.releaseFor('released')
  }

  /** @internal Ends the lease for `reason`, then compare-and-deletes its key. */
  async releaseFor(reason: LeaseEndReason): Promise<boolean> {
    this.end(reason)
    this.onReleased(this)
    return this.store.release(this.resource, this.owner)
  }

  private end(reason: LeaseEndReason, cause?: unknown): void {
    if (this.controller.signal.aborted) return
    clearTimeout(this.renewTimer)
    clearTimeout(this.expiryTimer)
    this.controller.abort(new LeaseLostError(this.resource, reason, { cause }))
  }

  /**
   * A promotion of the token source's primary since the token was issued (its timeline moved
   * on) invalidated the token: the signal aborts with 'failover'. Apart from the renewal, so
   * that a token source that does not answer never ends a lease the store still holds: the
   * next renewal asks again.
   */
  private async checkTimeline(): Promise<void> {
    const issuedOn = tokenTimeline(this.token)
    if (issuedOn === null) return
    const now = await answerWithin(
      this.timelineNow(),
      this.renewEveryMs,
      () => new Error('no answer'),
      'unref',
    ).catch(() => issuedOn)
    if (now === issuedOn) return
    this.end(
      'failover',
      new Error(
        `the token source's primary is on timeline ${now}; the token was issued on timeline ${issuedOn}`,
      ),
    )
  }

  /** The next renewal goes out ttl/3 after the previous request was sent. */
  private scheduleRenewal(lastSentAt: number): void {
    const delay = Math.max(0, lastSentAt + this.renewEveryMs - performance.now())
    this.renewTimer = setTimeout(() => void this.renew(), delay).unref()
  }

  /** Fires at the local expiry; a renewal in between moves the expiry, so it checks again. */
  private scheduleExpiryCheck(): void {
    const delay = Math.max(0, Math.ceil(this.remainingMs()))
    this.expiryTimer = setTimeout(() => {
      if (this.remainingMs() <= 0) this.end('expired')
      else this.scheduleExpiryCheck()
    }, delay).unref()
  }

  private async renew(): Promise<void> {
    if (this.remainingMs() <= 0) return this.end('expired')
    void this.checkTimeline()
    const sentAt = performance.now()
    let renewed: boolean
    try {
      renewed = await answerWithin(
        this.store.renew(this.resource, this.owner, this.ttlMs),
        this.renewEveryMs,
        () => new Error(`renewal got no ack within ${this.renewEveryMs} ms`),
        'unref',
      )
    } catch (err) {
      return this.end('lost', err)
    }
    if (this.controller.signal.aborted) return
    if (!renewed) return this.end('lost', new Error('the key is gone or held by another owner'))
    this.validUntil = Math.max(this.validUntil, sentAt + this.validForMs)
    this.scheduleRenewal(sentAt)
  }
}
