import { Backend, HEADER_BYTES } from './protocol.js'

/** Messages larger than this are passed on without being read (they are never ours). */
const MAX_INSPECTED_MESSAGE = 64 * 1024

/** Is this a message type the proxy reads: the rare ErrorResponse and ParameterStatus. */
export const isInspected = (type: number | undefined): boolean =>
  type === Backend.ErrorResponse || type === Backend.ParameterStatus

/**
 * Follows message boundaries in the server→client stream without decoding it, so the proxy
 * knows whether it may append a message of its own (after the upstream dies) and can read the
 * rare ErrorResponse and ParameterStatus. The bytes themselves are forwarded untouched by the
 * caller.
 */
export class BackendScanner {
  private remaining = 0
  private readonly stash = Buffer.alloc(HEADER_BYTES)
  private stashLength = 0
  private held: Buffer | null = null
  private heldLength = 0
  /** The next body byte is a ReadyForQuery's transaction status. */
  private statusNext = false

  constructor(
    private readonly onMessage: (message: Buffer) => void,
    private readonly onReadyForQuery?: (status: number) => void,
  ) {}

  /** True when the bytes seen so far end exactly at a message boundary. */
  atBoundary(): boolean {
    return this.remaining === 0 && this.stashLength === 0
  }

  scan(chunk: Buffer): void {
    let pos = 0
    const end = chunk.length
    if (this.stashLength > 0) {
      const need = HEADER_BYTES - this.stashLength
      if (end < need) {
        chunk.copy(this.stash, this.stashLength)
        this.stashLength += end
        return
      }
      chunk.copy(this.stash, this.stashLength, 0, need)
      this.stashLength = 0
      this.begin(this.stash, 0)
      if (this.held !== null) this.stash.copy(this.held, 0, 0, HEADER_BYTES)
      this.heldLength = HEADER_BYTES
      this.remaining -= HEADER_BYTES
      pos = need
    }
    while (pos < end) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, end - pos)
        // A ReadyForQuery's status is its last byte.
        if (this.statusNext && take === this.remaining) this.readStatus(chunk[pos + take - 1]!)
        this.remaining -= take
        // Counted first: a reader of the message sees the stream at its end (at a boundary).
        if (this.held !== null) this.collect(chunk, pos, take)
        pos += take
      } else if (end - pos < HEADER_BYTES) {
        chunk.copy(this.stash, 0, pos, end)
        this.stashLength = end - pos
        return
      } else {
        this.begin(chunk, pos)
        this.heldLength = 0
      }
    }
  }

  private readStatus(status: number): void {
    this.statusNext = false
    this.onReadyForQuery?.(status)
  }

  private begin(bytes: Buffer, pos: number): void {
    this.statusNext = bytes[pos] === Backend.ReadyForQuery
    const total = bytes.readUInt32BE(pos + 1) + 1
    this.remaining = total
    this.held =
      isInspected(bytes[pos]) && total <= MAX_INSPECTED_MESSAGE ? Buffer.allocUnsafe(total) : null
  }

  private collect(chunk: Buffer, pos: number, take: number): void {
    const held = this.held!
    chunk.copy(held, this.heldLength, pos, pos + take)
    this.heldLength += take
    if (this.heldLength === held.length) {
      this.held = null
      this.onMessage(held)
    }
  }
}
