/** A store or token source that gave no answer: which one, and the error it failed with. */
export interface Unreachable {
  /** 'the lease store (Redis)' or 'the token source (PostgreSQL)'. */
  source: string
  error: unknown
}

/**
 * Thrown by `acquire` when the lease was not granted within `waitMs`: another holder kept it, or
 * the store or token source did not answer; then `cause` is the error they failed with.
 */
export class LeaseUnavailableError extends Error {
  override name = 'LeaseUnavailableError'

  constructor(
    readonly resource: string,
    waitMs: number,
    unreachable?: Unreachable,
  ) {
    super(
      unreachable
        ? `lease on ${resource} not granted within ${waitMs} ms: ${unreachable.source} does not answer (${messageOf(unreachable.error)})`
        : `lease on ${resource} is held by another owner (waited ${waitMs} ms)`,
      unreachable && { cause: unreachable.error },
    )
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

/**
 * Whether a store or token source answered with an error (a PostgreSQL error response, which has
 * a severity, or a Redis error reply) rather than failing to answer: an answer is not retried.
 */
export function isServerAnswer(error: unknown): boolean {
  const { severity, name } = (error ?? {}) as { severity?: unknown; name?: unknown }
  return typeof severity === 'string' || name === 'ReplyError'
}

/**
 * Why a lease ended: another owner took the key or a renewal got no ack in time ('lost'), the
 * local validity ran out ('expired'), the holder released it ('released'), the manager closed
 * ('shutdown'), or the token source's primary was promoted since the token was issued, which
 * invalidates it ('failover': writes with it are refused, PF409; take a new lease).
 */
export type LeaseEndReason = 'lost' | 'expired' | 'released' | 'shutdown' | 'failover'

/** The abort reason of `lease.signal`: a critical section that checks the signal throws this. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError'

  constructor(
    readonly resource: string,
    readonly reason: LeaseEndReason,
    options?: { cause?: unknown },
  ) {
    super(`lease on ${resource} ended: ${reason}`, options)
  }
}
