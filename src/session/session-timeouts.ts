import type { Config } from '../config/schema.js'
import type { CutReason } from './cut-outcome.js'
import type { RequestProgress } from '../relay/request-progress.js'
import { TransactionStatus } from '../wire/protocol.js'

type Limits = Pick<Config['limits'], 'queryTimeoutMs' | 'idleTransactionTimeoutMs'>

export interface TimedSession {
  progress(): RequestProgress | null
  cut(reason: CutReason): Promise<void>
}

/** The timeout a session has run into, if any. */
export function overdue(progress: RequestProgress | null, limits: Limits): CutReason | null {
  if (progress === null) return null
  const { queryTimeoutMs, idleTransactionTimeoutMs } = limits
  if (progress.outstanding > 0)
    return queryTimeoutMs > 0 && progress.quietMs >= queryTimeoutMs ? 'queryTimeout' : null
  const inTransaction = progress.status !== TransactionStatus.Idle
  return inTransaction &&
    idleTransactionTimeoutMs > 0 &&
    progress.quietMs >= idleTransactionTimeoutMs
    ? 'idleTransactionTimeout'
    : null
}

/**
 * One shared sweep over the sessions, armed only when a timeout is set, so that no timer is
 * touched per message: it checks each session a tenth of the shortest timeout apart (50 ms to
 * 1 s), and cuts those that overran. Returns the function that stops it.
 */
export function watchSessionTimeouts(sessions: Iterable<TimedSession>, limits: Limits): () => void {
  const set = [limits.queryTimeoutMs, limits.idleTransactionTimeoutMs].filter((ms) => ms > 0)
  if (set.length === 0) return () => {}
  const periodMs = Math.min(1000, Math.max(50, Math.min(...set) / 10))
  const timer = setInterval(() => {
    for (const session of sessions) {
      const reason = overdue(session.progress(), limits)
      if (reason) void session.cut(reason)
    }
  }, periodMs)
  timer.unref()
  return () => clearInterval(timer)
}
