import { Frontend, HEADER_BYTES, TransactionStatus, transactionStatus } from '../wire/protocol.js'

/** Where a session's requests stand: what its timeouts and a cut client's SQLSTATE go by. */
export interface RequestProgress {
  /** Query, Sync and FunctionCall messages sent whose ReadyForQuery has not come back. */
  outstanding: number
  /** The status of the last ReadyForQuery. */
  status: TransactionStatus
  /** A request sent since the session was last idle may be a COMMIT. */
  mayCommit: boolean
  /** A named statement may be a COMMIT: from then on any Bind may commit. */
  namedCommit: boolean
  /**
   * A message since the last ReadyForQuery of all requests (a Parse without its Sync); a
   * Terminate is none.
   */
  unsynced: boolean
  /** Milliseconds since the server last sent anything (or since the first request went out). */
  quietMs: number
  /** ReadyForQuery messages saying idle so far: transactions ended, single statements included. */
  transactions: number
}

/**
 * What a relay taking a session over carries on from, so that the session's requests stand the
 * same for it (the JavaScript relay's and the native relay's, either way). The native relay
 * declares and converts these fields from this list (src/native/carried-progress.h, generated
 * by scripts/native-headers.mjs).
 */
export const CARRIED_FIELDS = [
  'outstanding',
  'status',
  'mayCommit',
  'namedCommit',
  'unsynced',
] as const

export type CarriedProgress = Pick<RequestProgress, (typeof CARRIED_FIELDS)[number]>

/** The carried fields of a session's progress. */
export function carriedOf(progress: CarriedProgress): CarriedProgress {
  const carried: Partial<Record<keyof CarriedProgress, unknown>> = {}
  for (const field of CARRIED_FIELDS) carried[field] = progress[field]
  return carried as CarriedProgress
}

/** COMMIT or END as a word: lexical and conservative, a literal that says so counts too. */
const COMMIT_WORD = /(?<![\w$\u0080-\uffff])(commit|end)(?![\w$\u0080-\uffff])/i

/**
 * Follows a session's requests from the messages the JavaScript relay frames, the way the
 * native relay does in C (src/native/session-progress.c): every Query, Sync and FunctionCall is
 * answered by one ReadyForQuery, whose status byte says whether a transaction is open.
 */
export class RequestTracker {
  private carried: CarriedProgress = {
    outstanding: 0,
    status: TransactionStatus.Idle,
    mayCommit: false,
    namedCommit: false,
    unsynced: false,
  }
  private progressAt = performance.now()
  private transactions = 0

  /** A client message starts at `pos`; the chunk holds it up to `end` (maybe not whole). */
  clientMessage(chunk: Buffer, pos: number, end: number): void {
    const carried = this.carried
    const type = chunk[pos]
    const total = chunk.readUInt32BE(pos + 1) + 1
    const whole = end - pos >= total
    // A Terminate asks for no answer and goes to no server connection that others reuse.
    if (type === Frontend.Terminate) return
    if (type === Frontend.CopyData) this.progressAt = performance.now()
    carried.unsynced = true
    if (type === Frontend.Query || type === Frontend.Parse) {
      const body = whole ? chunk.toString('latin1', pos + HEADER_BYTES, pos + total) : ''
      const commit = !whole || COMMIT_WORD.test(body)
      carried.mayCommit ||= commit
      if (type === Frontend.Parse && commit && (!whole || chunk[pos + HEADER_BYTES] !== 0))
        carried.namedCommit = true
    } else if (type === Frontend.Bind && carried.namedCommit) {
      carried.mayCommit = true
    }
    if (type !== Frontend.Query && type !== Frontend.Sync && type !== Frontend.FunctionCall) return
    if (carried.outstanding++ === 0) this.progressAt = performance.now()
  }

  /** The server sent bytes, or the client took them: its requests are moving. */
  serverBytes(): void {
    this.progressAt = performance.now()
  }

  /** A ReadyForQuery came back; `status` its status byte. */
  readyForQuery(status: number): void {
    const carried = this.carried
    carried.status = transactionStatus(status)
    if (carried.status === TransactionStatus.Idle) this.transactions++
    if (carried.outstanding > 0 && --carried.outstanding === 0) carried.mayCommit = false
    if (carried.outstanding === 0) carried.unsynced = false
  }

  /** Between transactions: every request answered outside one, and nothing sent since. */
  get atRest(): boolean {
    const { outstanding, unsynced, status } = this.carried
    return outstanding === 0 && !unsynced && status === TransactionStatus.Idle
  }

  snapshot(): RequestProgress {
    const { outstanding, status, mayCommit, namedCommit, unsynced } = this.carried
    const quietMs = performance.now() - this.progressAt
    // No spread: see relaySession.
    return {
      outstanding,
      status,
      mayCommit,
      namedCommit,
      unsynced,
      quietMs,
      transactions: this.transactions,
    }
  }

  /** The native relay carried the session until now: its requests stand as it left them. */
  resume(progress: CarriedProgress): void {
    this.carried = carriedOf(progress)
    this.progressAt = performance.now()
  }
}
