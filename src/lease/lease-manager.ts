import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { performance } from 'node:perf_hooks'
import { setTimeout as delay } from 'node:timers/promises'
import { answerWithin } from './answer-within.js'
import {
  isServerAnswer,
  LeaseLostError,
  LeaseUnavailableError,
  type Unreachable,
} from './errors.js'
import { Lease, type Queryable } from './lease.js'
import type { LeaseStore } from './lease-store.js'
import { closeOnSignals, stopClosingOnSignals } from './shutdown-signals.js'
import { chosenStore, openLeaseStore, storeIssuesTokens, type StoreChoice } from './store-option.js'
import { TokenIssuer, type TokenQueryable } from './token-issuer.js'

export interface LeaseManagerOptions extends StoreChoice {
  /**
   * PostgreSQL URL (direct, not through the proxy) or a pg.Pool (left open by `close()`): where
   * the redis and etcd stores draw tokens. The postgres store draws them in its own database.
   */
  tokenSource?: string | TokenQueryable
  /** Lease TTL in the store; default 10 s (etcd rounds it up to whole seconds). */
  ttlMs?: number
  /** ε, the assumed clock-rate difference in parts per million; default 1000. */
  driftPpm?: number
  /** SIGTERM/SIGINT release every lease, close, then exit 0; default true. */
  handleSignals?: boolean
}

export interface AcquireOptions {
  /**
   * How long to keep trying while another owner holds the lease, or while Redis or the token
   * source does not answer; default 0 (one try).
   */
  waitMs?: number
}

export interface WithLeaseOptions extends AcquireOptions {
  /** Raise the resource's fence on this connection before `work` runs (`lease.raiseFence`). */
  raiseFence?: Queryable
}

/** Pause between tries while waiting for a held lease. */
const retryDelayMs = { min: 10, spread: 40 }

/**
 * How long a request of acquire may stay unanswered, past waitMs when that is shorter, while its
 * connection is not known to be down: a first connection being made, a slow or frozen server.
 */
const answerMs = 1000

/** How often acquire looks again, past waitMs, whether an unanswered request's connection failed. */
const failureCheckMs = 20

const tokenSourceName = 'the token source (PostgreSQL)'

/** Thrown inside acquire when the store or token source failed to answer: it retries. */
class NoAnswer extends Error {
  constructor(readonly unreachable: Unreachable) {
    super(`${unreachable.source} does not answer`)
  }
}

/** A server's error answer as it is; any other failure as a NoAnswer from `source`. */
function noAnswerFrom(source: string): (error: unknown) => never {
  return (error) => {
    throw isServerAnswer(error) ? error : new NoAnswer({ source, error })
  }
}

/**
 * Grants leases on named resources: the lease lives in the store (PostgreSQL, Redis or etcd),
 * the fencing token comes from PostgreSQL (`pgfence.next_token()`). Connection errors on its own
 * store connection or token pool are emitted as 'connectionError' events; they never throw from
 * a timer.
 */
export class LeaseManager extends EventEmitter {
  private readonly store: LeaseStore
  private readonly tokens: TokenIssuer | null
  private readonly ttlMs: number
  private readonly driftPpm: number
  private readonly held = new Set<Lease>()
  private closing: Promise<void> | undefined
  /** The timeline the token source issues tokens on now: where the tokens come from. */
  private readonly timelineNow = (): Promise<number> =>
    this.tokens ? this.tokens.timeline() : this.store.timeline!()

  constructor(options: LeaseManagerOptions) {
    super()
    this.ttlMs = options.ttlMs ?? 10_000
    this.driftPpm = options.driftPpm ?? 1000
    if (!(this.ttlMs > 0)) throw new RangeError('ttlMs must be positive')
    if (!(this.driftPpm >= 0 && this.driftPpm < 1_000_000)) {
      throw new RangeError('driftPpm must be in [0, 1000000)')
    }
    const onError = (err: Error) => this.emit('connectionError', err)
    const store = chosenStore(options)
    const tokenSource = storeIssuesTokens(store) ? null : requiredTokenSource(options.tokenSource)
    this.store = openLeaseStore(store, options.keyPrefix, onError)
    this.tokens = tokenSource === null ? null : TokenIssuer.from(tokenSource, onError)
    if (options.handleSignals ?? true) closeOnSignals(this)
  }

  /**
   * Takes the lease, then draws a token. The token is drawn after the key is set, and the grant
   * is only handed out if it is still valid then: every later holder draws its token after this
   * lease ended, so it gets a higher one. Rejects with LeaseUnavailableError once `waitMs` is
   * over, whatever Redis or the token source does (a request not yet answered then gets up to
   * `answerMs` from when it was sent, unless its connection is known to be down).
   */
  async acquire(resource: string, options: AcquireOptions = {}): Promise<Lease> {
    this.throwIfClosed()
    const waitMs = options.waitMs ?? 0
    const owner = randomUUID()
    const deadline = performance.now() + waitMs
    for (;;) {
      let unreachable: Unreachable | undefined
      try {
        const lease = await this.tryToTake(resource, owner, deadline)
        if (lease) return lease
      } catch (err) {
        if (!(err instanceof NoAnswer)) throw err
        unreachable = err.unreachable
      }
      const waitLeft = deadline - performance.now()
      if (waitLeft <= 0) throw new LeaseUnavailableError(resource, waitMs, unreachable)
      await delay(Math.min(waitLeft, retryDelayMs.min + Math.random() * retryDelayMs.spread))
      this.throwIfClosed()
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

  /** A release that gets no answer (Redis down) is given up like a request of acquire. */
  private async shutDown(): Promise<void> {
    stopClosingOnSignals(this)
    try {
      const now = performance.now()
      await Promise.all(
        [...this.held].map((lease) =>
          this.answered(lease.releaseFor('shutdown'), now, now, () => this.store.failure()),
        ),
      )
    } finally {
      await Promise.allSettled([this.store.close(), this.tokens?.close()])
    }
  }

  private throwIfClosed(): void {
    if (this.closing) throw new Error('LeaseManager is closed')
  }

  /** One try: the lease, or null when another owner holds it. */
  private async tryToTake(
    resource: string,
    owner: string,
    deadline: number,
  ): Promise<Lease | null> {
    const sentAt = performance.now()
    const take = this.store.take(resource, owner, this.ttlMs)
    const taken = await this.answered(take, sentAt, deadline, () => this.store.failure()).catch(
      (err: unknown) => {
        // An answer that still comes must not leave the key held for a whole TTL.
        void take.then((lease) => lease && this.store.release(resource, owner)).catch(() => false)
        return noAnswerFrom(this.store.name)(err)
      },
    )
    return taken ? this.grant(resource, owner, sentAt, deadline, taken.token) : null
  }

  /**
   * `request`'s answer, or a rejection from `deadline` on: as soon as `failure()` says its
   * connection is down (with that error), at the latest `answerMs` after it was sent.
   */
  private answered<T>(
    request: Promise<T>,
    sentAt: number,
    deadline: number,
    failure: () => Error | undefined,
  ): Promise<T> {
    const latest = Math.max(deadline, sentAt + answerMs)
    const noAnswer = new Error(`no answer within ${Math.round(latest - sentAt)} ms`)
    const giveUp = () => (performance.now() >= latest ? (failure() ?? noAnswer) : failure())
    return answerWithin(request, deadline - performance.now(), giveUp, 'ref', failureCheckMs)
  }

  private async grant(
    resource: string,
    owner: string,
    sentAt: number,
    deadline: number,
    issued: bigint | undefined,
  ): Promise<Lease> {
    let token: bigint
    try {
      token =
        issued ??
        (await this.answered(this.tokens!.next(), performance.now(), deadline, () => undefined))
    } catch (err) {
      // The key would expire anyway; the token error is the one worth reporting.
      const release = this.store.release(resource, owner)
      await this.answered(release, performance.now(), deadline, () => this.store.failure()).catch(
        () => false,
      )
      return noAnswerFrom(tokenSourceName)(err)
    }
    const lease = new Lease(
      this.store,
      { resource, owner, token, sentAt, ttlMs: this.ttlMs, driftPpm: this.driftPpm },
      (released) => this.held.delete(released),
      this.timelineNow,
    )
    if (this.closing) {
      await lease.release()
      this.throwIfClosed()
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

function requiredTokenSource<T>(source: T | undefined): T {
  if (source === undefined) {
    throw new TypeError('LeaseManager: tokenSource is required with the redis and etcd stores')
  }
  return source
}
