import { Backend, HEADER_BYTES } from '../wire/protocol.js'

/** An expected ParseComplete/CloseComplete (true: pgfence's own, dropped), or a Sync. */
type Expected = boolean | 'sync'

/**
 * What the held server connection still owes a transaction-mode client, and which of its
 * answers are pgfence's own: the requests in flight (a Query, Sync or FunctionCall each ends
 * with a ReadyForQuery), the completions of Parse and Close in the order they were sent (those
 * of pgfence's own Parse and Close are dropped), and the ReadyForQuery of a settings replay.
 */
export class AnswerLedger {
  /** Requests sent whose ReadyForQuery has not come. */
  outstanding = 0
  private ownReadies = 0
  private expected: Expected[] = []

  /** `ready` hears each ReadyForQuery's status that reaches the client. */
  constructor(private readonly ready: (status: number) => void) {}

  /** A Query or FunctionCall sent. */
  request(): void {
    this.outstanding++
  }

  /** A Sync sent: a request, and the point an error skips to. */
  sync(): void {
    this.outstanding++
    this.expected.push('sync')
  }

  /** A Parse or Close sent; `own` when pgfence sent it and the client must not see its completion. */
  completion(own: boolean): void {
    this.expected.push(own)
  }

  /** pgfence's own Query sent (a settings replay): its ReadyForQuery is dropped. */
  ownRequest(): void {
    this.ownReadies++
  }

  /** Nothing owed: every request answered, no completion or own ReadyForQuery to come. */
  get settled(): boolean {
    return this.outstanding === 0 && this.ownReadies === 0 && this.expected.length === 0
  }

  /** Whether a server message goes to the client; notes what it answered. */
  keep(message: Buffer): boolean {
    const type = message[0]
    if (this.ownReadies > 0) {
      if (type === Backend.ReadyForQuery) this.ownReadies--
      return false
    }
    if (type === Backend.ParseComplete || type === Backend.CloseComplete)
      return this.expected.shift() !== true
    if (type === Backend.ErrorResponse) {
      // The server skips to the next Sync: completions expected before it will not come.
      const sync = this.expected.indexOf('sync')
      this.expected.splice(0, sync < 0 ? this.expected.length : sync)
    } else if (type === Backend.ReadyForQuery) {
      this.outstanding--
      if (this.expected[0] === 'sync') this.expected.shift()
      this.ready(message[HEADER_BYTES]!)
    }
    return true
  }
}
