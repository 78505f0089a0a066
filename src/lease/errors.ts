/** Thrown by `acquire` when another holder keeps the lease for the whole wait. */
export class LeaseUnavailableError extends Error {
  override name = 'LeaseUnavailableError'

  constructor(
    readonly resource: string,
    waitMs: number,
  ) {
    super(`lease on ${resource} is held by another owner (waited ${waitMs} ms)`)
  }
}

/**
 * Why a lease ended: another owner took the key or a renewal got no ack in time ('lost'), the
 * local validity ran out ('expired'), the holder released it ('released'), or the manager closed
 * ('shutdown').
 */
export type LeaseEndReason = 'lost' | 'expired' | 'released' | 'shutdown'

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
