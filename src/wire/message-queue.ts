import { PgError } from './error-response.js'
import { HEADER_BYTES } from './protocol.js'

/** Length of the packet at the head of `buffered`, 0 while unknown; throws on a bad length. */
export type FrameLength = (buffered: Buffer) => number

/** A typed message's length word out of bounds (`length`: the word, which counts itself). */
export const invalidMessageLength = (length: number): PgError =>
  new PgError('08P01', `invalid message length ${length}`)

/** Typed messages (type byte, then a length that counts itself) up to `maxBytes`. */
export const typedMessageLength =
  (maxBytes: number): FrameLength =>
  (buffered) => {
    if (buffered.length < HEADER_BYTES) return 0
    const total = buffered.readUInt32BE(1) + 1
    if (total < HEADER_BYTES || total > maxBytes) throw invalidMessageLength(total - 1)
    return total
  }

/** No bytes: shared, as nothing is ever written to it. */
const NOTHING = Buffer.alloc(0)

/**
 * Whole packets out of a byte stream, awaited one at a time: for the short exchanges pgfence
 * conducts itself (startup, authentication, a pooled connection's login and reset). Bytes are
 * copied, since a socket may reuse its read buffer; lengths are checked before buffering more.
 */
export class MessageQueue {
  private buffered: Buffer = NOTHING
  private waiter: { resolve: (message: Buffer) => void; reject: (err: Error) => void } | null = null
  private failure: Error | null = null

  constructor(private readonly frameLength: FrameLength) {}

  push(chunk: Buffer): void {
    this.buffered = Buffer.concat([this.buffered, chunk])
    this.deliver()
  }

  /** The pending and every later next() reject with this error. */
  fail(err: Error): void {
    this.failure ??= err
    this.deliver()
  }

  next(): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject }
      this.deliver()
    })
  }

  /**
   * The next packet if it is here whole, else null (then next() waits for it, or rejects): a
   * response read in one chunk is taken without a promise per message.
   */
  take(): Buffer | null {
    return this.waiter ? null : this.whole()
  }

  /** The bytes received after the packets taken so far. */
  get leftover(): Buffer {
    return this.buffered
  }

  private deliver(): void {
    const waiter = this.waiter
    if (!waiter) return
    const message = this.whole()
    if (message) {
      this.waiter = null
      return waiter.resolve(message)
    }
    if (this.failure) {
      this.waiter = null
      waiter.reject(this.failure)
    }
  }

  /** The packet at the head, taken, if it is here whole (a bad length becomes the failure). */
  private whole(): Buffer | null {
    let total = 0
    try {
      total = this.frameLength(this.buffered)
    } catch (err) {
      this.failure ??= err as Error
      return null
    }
    if (total === 0 || this.buffered.length < total) return null
    const message = this.buffered.subarray(0, total)
    this.buffered = this.buffered.subarray(total)
    return message
  }
}
