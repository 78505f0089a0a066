import { PgError } from '../wire/error-response.js'
import { TransactionStatus } from '../wire/protocol.js'
import type { RequestProgress } from '../relay/request-progress.js'

/** Why pgfence ends a session itself. */
export type CutReason =
  'shutdown' | 'queryTimeout' | 'idleTransactionTimeout' | 'upstreamLost' | 'failover'

const ROLLED_BACK = 'pgfence ended the session; its transaction was rolled back'

/** What the client is told when the transaction certainly did not commit. */
const notCommitted: Record<CutReason, () => PgError> = {
  shutdown: () => new PgError('57P01', 'terminating connection due to administrator command'),
  queryTimeout: () =>
    new PgError('57014', 'canceling statement due to query timeout', 'FATAL', ROLLED_BACK),
  idleTransactionTimeout: () =>
    new PgError(
      '25P03',
      'terminating connection due to idle-in-transaction timeout',
      'FATAL',
      ROLLED_BACK,
    ),
  upstreamLost: () => new PgError('08006', 'server closed the connection unexpectedly'),
  failover: () =>
    new PgError(
      '08006',
      'terminating connection: the upstream server is no longer the primary',
      'FATAL',
      ROLLED_BACK,
      'reconnect: pgfence connects to the new primary',
    ),
}

const why: Record<CutReason, string> = {
  shutdown: 'pgfence is shutting down',
  queryTimeout: 'the server did not answer within limits.queryTimeoutMs',
  idleTransactionTimeout: 'idle in transaction too long',
  upstreamLost: 'the connection to the server was lost',
  failover: 'the upstream server stopped being the primary',
}

/** A statement that may commit is in flight: a COMMIT, or any statement outside a block. */
export const commitInFlight = (progress: RequestProgress | null): boolean =>
  progress !== null &&
  progress.outstanding > 0 &&
  (progress.mayCommit || progress.status === TransactionStatus.Idle)

/**
 * The error a session's client gets when pgfence cuts it off. A statement in flight that may
 * commit (a COMMIT, or any statement outside a transaction block) leaves the outcome unknown:
 * 08007, never a code that a client may read as "rolled back, safe to retry".
 */
export function cutError(reason: CutReason, progress: RequestProgress | null): PgError {
  if (commitInFlight(progress)) {
    return new PgError(
      '08007',
      'transaction resolution unknown',
      'FATAL',
      `${why[reason]} while a statement that may commit was in flight`,
      'check whether the transaction committed before retrying it',
    )
  }
  return notCommitted[reason]()
}

/**
 * Cancels what a cut session's backend runs, unless it may be a COMMIT waiting for a
 * synchronous standby: a cancel there leaves the transaction committed locally only
 * (PostgreSQL warns; a failover may lose it). Such a backend is left to finish: PostgreSQL does
 * not end the wait when its client connection closes (a session pool's reset waits for its
 * answer). Resolves once a cancel request was delivered, or not sent.
 */
export async function cancelUnlessCommitting(
  progress: RequestProgress | null,
  cancel: () => Promise<void>,
  commitsMayWait: () => Promise<boolean>,
): Promise<void> {
  if (progress === null || progress.outstanding === 0) return
  if (commitInFlight(progress) && (await commitsMayWait().catch(() => true))) return
  await cancel()
}
