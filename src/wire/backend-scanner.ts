import { Backend, HEADER_BYTES } from './protocol.js'

/** Messages larger than this are passed on without being read (they are never ours). */
const MAX_INSPECTED_MESSAGE = 64 * 1024

const NOTHING = Buffer.alloc(0)

/** Is this a message type the proxy reads: the rare ErrorResponse, NoticeResponse, ParameterStatus. */
export const isInspected = (type: number | undefined): boolean =>
  type === Backend.ErrorResponse ||
  type === Backend.NoticeResponse ||
  type === Backend.ParameterStatus

/** Messages held back until whole, so that the reader may replace them. */
const isWithheld = (type: number | undefined): boolean =>
  type === Backend.ErrorResponse || type === Backend.NoticeResponse

/**
 * Reads a whole inspected message; for an ErrorResponse or NoticeResponse it may return the
 * bytes to send in its place. A NoticeResponse replaced stands for its statement's outcome (an
 * ErrorResponse): the CommandComplete right after it is dropped, as a failed statement has none.
 */
export type OnServerMessage = (message: Buffer) => Buffer | undefined

/**
 * Follows message boundaries in the server→client stream without decoding it, so the proxy
 * knows whether it may append a message of its own (after the upstream dies) and can read the
 * rare ErrorResponse, NoticeResponse and ParameterStatus. `scan` returns the bytes to forward:
 * the chunk itself, except that an ErrorResponse or NoticeResponse (and a header split across
 * chunks) is held back until it is whole, and then forwarded as it is or as the reader replaced
 * it.
 */
export class BackendScanner {
  private remaining = 0
  private readonly stash = Buffer.alloc(HEADER_BYTES)
  private stashLength = 0
  private held: Buffer | null = null
  private heldLength = 0
  /** The current message is held back from the client (isWithheld). */
  private withholding = false
  /** A NoticeResponse was replaced: a CommandComplete right after it is dropped. */
  private dropCompletion = false
  /** The next body byte is a ReadyForQuery's transaction status. */
  private statusNext = false

  constructor(
    private readonly onMessage: OnServerMessage,
    private readonly onReadyForQuery?: (status: number) => void,
  ) {}

  /** True when the bytes seen so far end exactly at a message boundary. */
  atBoundary(): boolean {
    return this.remaining === 0 && this.stashLength === 0
  }

  scan(chunk: Buffer): Buffer {
    const out = new Output(chunk)
    let pos = 0
    const end = chunk.length
    if (this.stashLength > 0) {
      const need = HEADER_BYTES - this.stashLength
      if (end < need) {
        chunk.copy(this.stash, this.stashLength)
        this.stashLength += end
        return NOTHING
      }
      const stashed = Buffer.from(this.stash.subarray(0, this.stashLength))
      chunk.copy(this.stash, this.stashLength, 0, need)
      this.stashLength = 0
      this.begin(this.stash, 0)
      if (this.held !== null) this.stash.copy(this.held, 0, 0, HEADER_BYTES)
      this.heldLength = HEADER_BYTES
      this.remaining -= HEADER_BYTES
      pos = need
      if (this.withholding) out.skipTo(pos)
      else out.push(stashed)
      if (this.remaining === 0 && this.held !== null) this.complete(out, pos)
    }
    while (pos < end) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, end - pos)
        // A ReadyForQuery's status is its last byte.
        if (this.statusNext && take === this.remaining) this.readStatus(chunk[pos + take - 1]!)
        this.remaining -= take
        pos += take
        if (this.withholding) out.skipTo(pos)
        // Counted first: a reader of the message sees the stream at its end (at a boundary).
        if (this.held !== null) this.collect(chunk, pos - take, take, out)
      } else if (end - pos < HEADER_BYTES) {
        out.flushTo(pos)
        out.skipTo(end)
        chunk.copy(this.stash, 0, pos, end)
        this.stashLength = end - pos
        break
      } else {
        this.begin(chunk, pos)
        if (this.withholding) out.flushTo(pos)
        this.heldLength = 0
      }
    }
    return out.result()
  }

  private readStatus(status: number): void {
    this.statusNext = false
    this.onReadyForQuery?.(status)
  }

  private begin(bytes: Buffer, pos: number): void {
    this.statusNext = bytes[pos] === Backend.ReadyForQuery
    const total = bytes.readUInt32BE(pos + 1) + 1
    this.remaining = total
    const dropped = this.dropCompletion && bytes[pos] === Backend.CommandComplete
    this.dropCompletion = false
    const inspected = (dropped || isInspected(bytes[pos])) && total <= MAX_INSPECTED_MESSAGE
    this.held = inspected ? Buffer.allocUnsafe(total) : null
    this.withholding = inspected && (dropped || isWithheld(bytes[pos]))
  }

  private collect(chunk: Buffer, pos: number, take: number, out: Output): void {
    chunk.copy(this.held!, this.heldLength, pos, pos + take)
    this.heldLength += take
    if (this.heldLength === this.held!.length) this.complete(out, pos + take)
  }

  /** The held message is whole: read it, and forward it (or its replacement) if it was held. */
  private complete(out: Output, pos: number): void {
    const held = this.held!
    this.held = null
    const dropped = held[0] === Backend.CommandComplete
    const replacement = dropped ? NOTHING : this.onMessage(held)
    this.dropCompletion = held[0] === Backend.NoticeResponse && replacement !== undefined
    if (!this.withholding) return
    this.withholding = false
    out.push(replacement ?? held)
    out.skipTo(pos)
  }
}

/** The bytes scan forwards: runs of the chunk, and held messages in their place. */
class Output {
  private readonly pieces: Buffer[] = []
  private from = 0

  constructor(private readonly chunk: Buffer) {}

  /** The chunk's bytes up to `pos` are forwarded. */
  flushTo(pos: number): void {
    if (pos > this.from) this.pieces.push(this.chunk.subarray(this.from, pos))
    this.from = Math.max(this.from, pos)
  }

  /** The chunk's bytes up to `pos` are held (or dropped). */
  skipTo(pos: number): void {
    this.from = Math.max(this.from, pos)
  }

  push(bytes: Buffer): void {
    this.pieces.push(bytes)
  }

  result(): Buffer {
    this.flushTo(this.chunk.length)
    if (this.pieces.length === 1) return this.pieces[0]!
    return this.pieces.length === 0 ? NOTHING : Buffer.concat(this.pieces)
  }
}
