import { FRONTEND_TYPES, HEADER_BYTES } from './protocol.js'
import { PgError } from './error-response.js'

export interface FrameSink {
  /** Bytes to pass on as they are: a view of the input, valid only until it is written. */
  forward(bytes: Buffer): void
  /** One whole message of an intercepted type, header included. */
  intercept(message: Buffer): void
  /** The stream broke the protocol; nothing more will be delivered. */
  fail(error: PgError): void
  /** A valid message starts at `pos`; the bytes hold it up to `end` (maybe not whole). */
  started?(bytes: Buffer, pos: number, end: number): void
}

/**
 * Splits the client→server byte stream into messages without copying it: runs of messages the
 * proxy does not inspect are handed on as views of the input chunk, so a large CopyData or Bind
 * streams through without being buffered. Only intercepted types (Query, Parse) are gathered
 * whole. Every length is checked before anything is allocated for it.
 */
export class MessageFramer {
  /** Bytes of a pass-through message that are still to come. */
  private passRemaining = 0
  /** A header split across chunks (at most 4 bytes held). */
  private readonly stash = Buffer.alloc(HEADER_BYTES)
  private stashLength = 0
  /** An intercepted message split across chunks. */
  private held: Buffer | null = null
  private heldLength = 0
  private failed = false

  constructor(
    private readonly sink: FrameSink,
    /** Both may change between messages (a config reload). */
    public maxMessageBytes: number,
    /** 256 flags: 1 for message types to intercept. */
    public interceptTypes: Uint8Array,
  ) {}

  /** True when the bytes seen so far end exactly at a message boundary. */
  atBoundary(): boolean {
    return this.passRemaining === 0 && this.stashLength === 0 && this.held === null
  }

  push(chunk: Buffer): void {
    if (this.failed) return
    let pos = this.stashLength > 0 ? this.completeStashedHeader(chunk) : 0
    if (pos < 0) return
    let runStart = pos
    const end = chunk.length
    while (pos < end) {
      if (this.passRemaining > 0) {
        const take = Math.min(this.passRemaining, end - pos)
        this.passRemaining -= take
        pos += take
      } else if (this.held !== null) {
        pos = this.fillHeld(chunk, pos)
        runStart = pos
      } else if (end - pos < HEADER_BYTES) {
        this.forwardRun(chunk, runStart, pos)
        chunk.copy(this.stash, 0, pos, end)
        this.stashLength = end - pos
        return
      } else {
        const total = this.checkHeader(chunk, pos)
        if (total < 0) return this.forwardRun(chunk, runStart, pos)
        this.sink.started?.(chunk, pos, end)
        if (this.interceptTypes[chunk[pos]!] === 1) {
          this.forwardRun(chunk, runStart, pos)
          if (end - pos >= total) {
            this.sink.intercept(chunk.subarray(pos, pos + total))
            pos += total
          } else {
            this.startHeld(total)
            pos = this.fillHeld(chunk, pos)
          }
          runStart = pos
        } else if (end - pos >= total) {
          pos += total
        } else {
          this.passRemaining = total - (end - pos)
          pos = end
        }
      }
    }
    this.forwardRun(chunk, runStart, pos)
  }

  /** Finishes a header split across chunks; returns where the chunk's own bytes resume, -1 on failure. */
  private completeStashedHeader(chunk: Buffer): number {
    const need = HEADER_BYTES - this.stashLength
    if (chunk.length < need) {
      chunk.copy(this.stash, this.stashLength)
      this.stashLength += chunk.length
      return chunk.length
    }
    chunk.copy(this.stash, this.stashLength, 0, need)
    this.stashLength = 0
    const total = this.checkHeader(this.stash, 0)
    if (total < 0) return -1
    this.sink.started?.(this.stash, 0, HEADER_BYTES)
    if (this.interceptTypes[this.stash[0]!] === 1) {
      this.startHeld(total)
      this.stash.copy(this.held!, 0)
      this.heldLength = HEADER_BYTES
      return this.fillHeld(chunk, need)
    }
    this.sink.forward(Buffer.from(this.stash))
    this.passRemaining = total - HEADER_BYTES
    return need
  }

  /** Validates type and length; returns the whole message size, or -1 after failing the stream. */
  private checkHeader(bytes: Buffer, pos: number): number {
    const type = bytes[pos]!
    const length = bytes.readUInt32BE(pos + 1)
    if (FRONTEND_TYPES[type] !== 1) {
      return this.fail(new PgError('08P01', `invalid frontend message type ${type}`))
    }
    if (length < 4 || length > this.maxMessageBytes - 1) {
      return this.fail(new PgError('08P01', `invalid message length ${length}`))
    }
    return length + 1
  }

  private startHeld(total: number): void {
    this.held = Buffer.allocUnsafe(total)
    this.heldLength = 0
  }

  private fillHeld(chunk: Buffer, pos: number): number {
    const held = this.held!
    const take = Math.min(held.length - this.heldLength, chunk.length - pos)
    chunk.copy(held, this.heldLength, pos, pos + take)
    this.heldLength += take
    if (this.heldLength === held.length) {
      this.held = null
      this.sink.intercept(held)
    }
    return pos + take
  }

  private forwardRun(chunk: Buffer, start: number, end: number): void {
    if (start === 0 && end === chunk.length) this.sink.forward(chunk)
    else if (end > start) this.sink.forward(chunk.subarray(start, end))
  }

  private fail(error: PgError): -1 {
    this.failed = true
    this.sink.fail(error)
    return -1
  }
}
