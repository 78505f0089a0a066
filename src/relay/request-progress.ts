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
  /** A message since the last ReadyForQuery of all requests (a Parse without its Sync). */
  unsynced: boolean
  /** Milliseconds since the server last sent anything (or since the first request went out). */
  quietMs: number
  /** ReadyForQuery messages saying idle so far: transactions ended, single statements included. */
  transactions: number
}

/**
 * What a relay taking a session over carries on from, so that the session's requests stand the
 * same for it (the JavaScript relay's and the native relay's, either way).
 */
export type CarriedProgress = Pick<
  RequestProgress,
  'outstanding' | 'status' | 'mayCommit' | 'namedCommit' | 'unsynced'
>

/** COMMIT or END as a word: lexical and conservative, a literal that says so counts too. */
const COMMIT_WORD = /(?<![\w$\u0080-\uffff])(commit|end)(?![\w$\u0080-\uffff])/i

/**
 * Follows a session's requests from the messages the JavaScript relay frames, the way the
 * native relay does in C (src/native/session-progress.c): every Query, Sync and FunctionCall is
 * answered by one ReadyForQuery, whose status byte says whether a transaction is open.
 */
export class RequestTracker {
  private outstanding = 0
  private status: TransactionStatus = TransactionStatus.Idle
  private mayCommit = false
  /** A named statement may be a COMMIT: from then on any Bind may commit. */
  private namedCommit = false
  /** A message since the last ReadyForQuery of all requests (a Parse without its Sync). */
  private unsynced = false
  private progressAt = performance.now()
  private transactions = 0

  /** A client message starts at `pos`; the chunk holds it up to `end` (maybe not whole). */
  clientMessage(chunk: Buffer, pos: number, end: number): void {
    const type = chunk[pos]
    const total = chunk.readUInt32BE(pos + 1) + 1
    const whole = end - pos >= total
    if (type === Frontend.CopyData) this.progressAt = performance.now()
    this.unsynced = true
    if (type === Frontend.Query || type === Frontend.Parse) {
      const body = whole ? chunk.toString('latin1', pos + HEADER_BYTES, pos + total) : ''
      const commit = !whole || COMMIT_WORD.test(body)
      this.mayCommit ||= commit
      if (type === Frontend.Parse && commit && (!whole || chunk[pos + HEADER_BYTES] !== 0))
        this.namedCommit = true
    } else if (type === Frontend.Bind && this.namedCommit) {
      this.mayCommit = true
    }
    if (type !== Frontend.Query && type !== Frontend.Sync && type !== Frontend.FunctionCall) return
    if (this.outstanding++ === 0) this.progressAt = performance.now()
  }

  /** The server sent bytes, or the client took them: its requests are moving. */
  serverBytes(): void {
    this.progressAt = performance.now()
  }

  /** A ReadyForQuery came back; `status` its status byte. */
  readyForQuery(status: number): void {
    this.status = transactionStatus(status)
    if (this.status === TransactionStatus.Idle) this.transactions++
    if (this.outstanding > 0 && --this.outstanding === 0) this.mayCommit = false
    if (this.outstanding === 0) this.unsynced = false
  }

  /** Between transactions: every request answered outside one, and nothing sent since. */
  get atRest(): boolean {
    return this.outstanding === 0 && !this.unsynced && this.status === TransactionStatus.Idle
  }

  snapshot(): RequestProgress {
    const { outstanding, status, mayCommit, namedCommit, unsynced, transactions } = this
    const quietMs = performance.now() - this.progressAt
    return { outstanding, status, mayCommit, namedCommit, unsynced, quietMs, transactions }
  }

  /** The native relay carried the session until now: its requests stand as it left them. */
  resume(progress: CarriedProgress): void {
    this.outstanding = progress.outstanding
    this.status = progress.status
    this.mayCommit = progress.mayCommit
    this.namedCommit = progress.namedCommit
    this.unsynced = progress.unsynced
    this.progressAt = performance.now()
  }
}
