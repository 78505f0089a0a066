import { FRONTEND_TYPES, HEADER_BYTES } from './protocol.js'
import { PgError } from './error-response.js'
import { invalidMessageLength } from './message-queue.js'

export interface FrameSink {
  /** Bytes to pass on as they are: a view of the input, valid only until it is written. */
  forward(bytes: Buffer): void
  /**
   * One whole message of an intercepted type, header included: a view of the input (valid only
   * until it is written), or a copy when it came in pieces.
   */
  intercept(message: Buffer): void
  /** The stream broke the protocol; nothing more will be delivered. */
  fail(error: PgError): void
  /** A valid message starts at `pos`; the bytes hold it up to `end` (maybe not whole). */
  started?(bytes: Buffer, pos: number, end: number): void
}

/** Which side sends a stream, and so how the framer checks its headers. */
export interface Sender {
  /** The name its errors give its messages. */
  readonly name: 'frontend' | 'backend'
  /** 256 flags: 1 for the message types it may send. */
  readonly types: Uint8Array
  /**
   * A message longer than maxMessageBytes: true, it passes on without being intercepted (a
   * server's: none that large is ever one pgfence reads); false, it breaks the protocol (a
   * client's, refused before anything is buffered for it).
   */
  readonly passesOversized: boolean
}

/** Every byte as a message type: intercepting all of them frames a stream into whole messages. */
export const EVERY_TYPE: Uint8Array = new Uint8Array(256).fill(1)

export const FROM_CLIENT: Sender = {
  name: 'frontend',
  types: FRONTEND_TYPES,
  passesOversized: false,
}
/** The server is trusted with its types; only its lengths are checked. */
export const FROM_SERVER: Sender = { name: 'backend', types: EVERY_TYPE, passesOversized: true }

/**
 * Splits a byte stream into messages without copying it: runs of messages the proxy does not
 * inspect are handed on as views of the input chunk, so a large CopyData, Bind or DataRow
 * streams through without being buffered. Only intercepted types are gathered whole (copied
 * only when split across chunks). Every length is checked before anything is allocated for it.
 * One framer serves both directions: `sender` says whose stream it is.
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
  /** The stream failed, or the sink stopped framing: nothing more is delivered. */
  private stopped = false
  /** The sink's callbacks, read from the framer's own fields: sinks come in many shapes. */
  private readonly forward: FrameSink['forward']
  private readonly intercept: FrameSink['intercept']
  private readonly started: FrameSink['started']
  private readonly failed: FrameSink['fail']

  constructor(
    sink: FrameSink,
    /** Both may change between messages (a config reload, a sink's own choice). */
    public maxMessageBytes: number,
    /** 256 flags: 1 for message types to intercept. */
    public interceptTypes: Uint8Array,
    private readonly sender: Sender,
  ) {
    this.forward = sink.forward.bind(sink)
    this.intercept = sink.intercept.bind(sink)
    this.started = sink.started?.bind(sink)
    this.failed = sink.fail.bind(sink)
  }

  /** True when the bytes seen so far end exactly at a message boundary. */
  atBoundary(): boolean {
    return this.passRemaining === 0 && this.stashLength === 0 && this.held === null
  }

  /**
   * Called from intercept: framing ends after the message given, and push returns where it
   * ended (the rest of the stream is someone else's to read).
   */
  stop(): void {
    this.stopped = true
  }

  /** Frames a chunk; returns how far: all of it, unless the stream failed or stop() was called. */
  push(chunk: Buffer): number {
    if (this.stopped) return 0
    let pos = this.stashLength > 0 ? this.completeStashedHeader(chunk) : 0
    let runStart = pos
    const end = chunk.length
    while (pos < end && !this.stopped) {
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
        return end
      } else {
        const total = this.checkHeader(chunk, pos)
        if (total < 0) break
        this.started?.(chunk, pos, end)
        if (this.intercepts(chunk[pos]!, total)) {
          if (pos > runStart) this.forwardRun(chunk, runStart, pos)
          if (end - pos >= total) {
            pos += total
            this.intercept(chunk.subarray(pos - total, pos))
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
    return pos
  }

  /** Finishes a header split across chunks; returns where the chunk's own bytes resume. */
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
    if (total < 0) return 0
    this.started?.(this.stash, 0, HEADER_BYTES)
    if (this.intercepts(this.stash[0]!, total)) {
      this.startHeld(total)
      this.stash.copy(this.held!, 0)
      this.heldLength = HEADER_BYTES
      return this.fillHeld(chunk, need)
    }
    this.forward(Buffer.from(this.stash))
    this.passRemaining = total - HEADER_BYTES
    return need
  }

  /** Validates type and length; returns the whole message size, or -1 after failing the stream. */
  private checkHeader(bytes: Buffer, pos: number): number {
    const type = bytes[pos]!
    const length = bytes.readUInt32BE(pos + 1)
    const sender = this.sender
    if (sender.types[type] !== 1)
      return this.fail(new PgError('08P01', `invalid ${sender.name} message type ${type}`))
    if (length < 4 || (length > this.maxMessageBytes - 1 && !sender.passesOversized)) {
      return this.fail(invalidMessageLength(length))
    }
    return length + 1
  }

  private intercepts(type: number, total: number): boolean {
    return this.interceptTypes[type] === 1 && total <= this.maxMessageBytes
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
      this.intercept(held)
    }
    return pos + take
  }

  private forwardRun(chunk: Buffer, start: number, end: number): void {
    if (end <= start) return
    this.forward(start === 0 && end === chunk.length ? chunk : chunk.subarray(start, end))
  }

  private fail(error: PgError): -1 {
    this.stopped = true
    this.failed(error)
    return -1
  }
}
