/**
 * Read buffers for sockets that read into a buffer of their own (Node's `onread`), taken back
 * once the socket reads no more (handed to the native relay, or closed): an idle session in the
 * relay then holds none, and the next connection reuses the buffer instead of allocating one.
 */
export class ReadBufferPool {
  private readonly idle: Buffer[] = []

  constructor(
    readonly bufferBytes: number,
    /** Buffers kept for reuse; more are dropped when returned. */
    private readonly maxIdle: number,
  ) {}

  take(): Buffer {
    return this.idle.pop() ?? Buffer.allocUnsafe(this.bufferBytes)
  }

  /** `socket` reads into `buffer` (taken here); it may come back with returnReadBuffer. */
  lend(socket: object, buffer: Buffer): void {
    loans.set(socket, { pool: this, buffer })
  }

  give(buffer: Buffer): void {
    if (this.idle.length < this.maxIdle) this.idle.push(buffer)
  }
}

const loans = new WeakMap<object, { pool: ReadBufferPool; buffer: Buffer }>()

/**
 * The socket will never read again and nothing it read is still referenced: its buffer goes
 * back to its pool (once; nothing happens for a socket without one).
 */
export function returnReadBuffer(socket: object): void {
  const loan = loans.get(socket)
  if (!loan) return
  loans.delete(socket)
  loan.pool.give(loan.buffer)
}
