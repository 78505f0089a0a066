import { Backend, HEADER_BYTES } from './protocol.js'

/** ErrorResponses larger than this are passed on without being read (they are never ours). */
const MAX_INSPECTED_ERROR = 64 * 1024

/**
 * Follows message boundaries in the server→client stream without decoding it, so the proxy
 * knows whether it may append a message of its own (after the upstream dies) and can read the
 * rare ErrorResponse. The bytes themselves are forwarded untouched by the caller.
 */
export class BackendScanner {
  private remaining = 0
  private readonly stash = Buffer.alloc(HEADER_BYTES)
  private stashLength = 0
  private error: Buffer | null = null
  private errorLength = 0

  constructor(private readonly onError: (message: Buffer) => void) {}

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
      if (this.error !== null) this.stash.copy(this.error, 0, 0, HEADER_BYTES)
      this.errorLength = HEADER_BYTES
      this.remaining -= HEADER_BYTES
      pos = need
    }
    while (pos < end) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, end - pos)
        if (this.error !== null) this.collectError(chunk, pos, take)
        this.remaining -= take
        pos += take
      } else if (end - pos < HEADER_BYTES) {
        chunk.copy(this.stash, 0, pos, end)
        this.stashLength = end - pos
        return
      } else {
        this.begin(chunk, pos)
        this.errorLength = 0
      }
    }
  }

  private begin(bytes: Buffer, pos: number): void {
    const total = bytes.readUInt32BE(pos + 1) + 1
    this.remaining = total
    this.error =
      bytes[pos] === Backend.ErrorResponse && total <= MAX_INSPECTED_ERROR
        ? Buffer.allocUnsafe(total)
        : null
  }

  private collectError(chunk: Buffer, pos: number, take: number): void {
    const error = this.error!
    chunk.copy(error, this.errorLength, pos, pos + take)
    this.errorLength += take
    if (this.errorLength === error.length) {
      this.error = null
      this.onError(error)
    }
  }
}
