import type { PgError } from './error-response.js'
import { EVERY_TYPE, FROM_SERVER, MessageFramer } from './message-framer.js'
import { Backend, HEADER_BYTES, typeTable } from './protocol.js'

/** Messages larger than this are passed on without being read (they are never ours). */
const MAX_INSPECTED_MESSAGE = 64 * 1024

const NOTHING = Buffer.alloc(0)

/** The rare messages read whole: ErrorResponse, NoticeResponse, ParameterStatus. */
const INSPECTED_TYPES = typeTable([
  Backend.ErrorResponse,
  Backend.NoticeResponse,
  Backend.ParameterStatus,
])
/** What the framer gathers is decided at each message's header (started). */
const NO_TYPE = new Uint8Array(256)

/**
 * Reads a whole inspected message; for an ErrorResponse or NoticeResponse it may return the
 * bytes to send in its place. A NoticeResponse replaced stands for its statement's outcome (an
 * ErrorResponse): the CommandComplete right after it is dropped, as a failed statement has none.
 */
export type OnServerMessage = (message: Buffer) => Buffer | undefined

/**
 * Follows message boundaries in the server→client stream (with the server framer) without
 * decoding it, so the proxy knows whether it may append a message of its own (after the
 * upstream dies) and can read the rare ErrorResponse, NoticeResponse and ParameterStatus.
 * `scan` returns the bytes to forward: the chunk itself, except that a message read is held
 * back until it is whole, and then forwarded as it is or as the reader replaced it.
 */
export class BackendScanner {
  private readonly framer: MessageFramer
  private readonly out = new ForwardedBytes()
  /** A NoticeResponse was replaced: a CommandComplete right after it is dropped. */
  private dropCompletion = false

  constructor(
    private readonly onMessage: OnServerMessage,
    private readonly onReadyForQuery?: (status: number) => void,
    /** The server broke the protocol (a length below four): nothing more is forwarded. */
    onInvalid: (error: PgError) => void = (error) => {
      throw error
    },
  ) {
    this.framer = new MessageFramer(
      {
        forward: (bytes) => this.out.add(bytes),
        intercept: (message) => this.read(message),
        fail: onInvalid,
        started: (bytes, pos, end) => this.started(bytes, pos, end),
      },
      MAX_INSPECTED_MESSAGE,
      NO_TYPE,
      FROM_SERVER,
    )
  }

  /** True when the bytes seen so far end exactly at a message boundary. */
  atBoundary(): boolean {
    return this.framer.atBoundary()
  }

  scan(chunk: Buffer): Buffer {
    this.out.start(chunk)
    this.framer.push(chunk)
    return this.out.take()
  }

  /** At each message's header: whether the framer gathers it whole for read(). */
  private started(bytes: Buffer, pos: number, end: number): void {
    const type = bytes[pos]!
    let gathered = INSPECTED_TYPES[type] === 1
    if (type === Backend.CommandComplete) gathered = this.dropCompletion
    else if (type === Backend.ReadyForQuery) {
      // Its status byte: read here when the chunk holds it, else once the message is gathered.
      gathered = end - pos <= HEADER_BYTES
      if (!gathered) this.onReadyForQuery?.(bytes[pos + HEADER_BYTES]!)
    }
    this.dropCompletion = false
    this.framer.interceptTypes = gathered ? EVERY_TYPE : NO_TYPE
  }

  /** A whole message read; the framer stands at its end (at a boundary) for the reader. */
  private read(message: Buffer): void {
    const type = message[0]
    // A CommandComplete is gathered only right after a replaced NoticeResponse: dropped.
    if (type === Backend.CommandComplete) return
    if (type === Backend.ReadyForQuery) {
      this.onReadyForQuery?.(message[HEADER_BYTES]!)
      return this.out.add(message)
    }
    const replacement = this.onMessage(message)
    this.dropCompletion = type === Backend.NoticeResponse && replacement !== undefined
    this.out.add(replacement ?? message)
  }
}

/**
 * The bytes one scan forwards: runs of the chunk, adjacent views joined into one (a message read
 * and passed on unchanged does not split its chunk), and copies or replacements in their place.
 */
class ForwardedBytes {
  private readonly pieces: Buffer[] = []
  private chunk: Buffer = NOTHING
  /** The run of the chunk not yet in pieces. */
  private from = 0
  private to = 0

  start(chunk: Buffer): void {
    this.chunk = chunk
    this.from = this.to = 0
  }

  add(bytes: Buffer): void {
    const { chunk } = this
    const offset = bytes.byteOffset - chunk.byteOffset
    const inChunk =
      bytes.buffer === chunk.buffer && offset >= 0 && offset + bytes.length <= chunk.length
    if (inChunk && offset === this.to) {
      this.to += bytes.length
      return
    }
    this.flushRun()
    if (!inChunk) return void this.pieces.push(bytes)
    this.from = offset
    this.to = offset + bytes.length
  }

  take(): Buffer {
    // The usual case: the chunk itself, as it came.
    if (this.from === 0 && this.to === this.chunk.length && this.pieces.length === 0) {
      const chunk = this.chunk
      this.chunk = NOTHING
      return chunk
    }
    this.flushRun()
    const { pieces } = this
    const bytes =
      pieces.length === 1 ? pieces[0]! : pieces.length === 0 ? NOTHING : Buffer.concat(pieces)
    pieces.length = 0
    this.chunk = NOTHING
    return bytes
  }

  private flushRun(): void {
    if (this.to > this.from) this.pieces.push(this.chunk.subarray(this.from, this.to))
    this.from = this.to
  }
}
