import type { Duplex } from 'node:stream'
import { PgError } from '../wire/error-response.js'
import { startupPacketLength } from '../wire/startup-packet.js'

/**
 * Reads whole startup-phase packets from a client socket. Lengths are checked as soon as their
 * four bytes arrive, before any buffer is sized from them.
 */
export class StartupReader {
  private buffered: Buffer = Buffer.alloc(0)
  private waiter: { resolve: (packet: Buffer) => void; reject: (err: Error) => void } | null = null
  private ended: Error | null = null
  private readonly onData = (chunk: Buffer) => {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk])
    this.deliver()
  }
  private readonly onEnd = () =>
    this.finish(new Error('client closed the connection during startup'))
  private readonly onError = (err: Error) => this.finish(err)

  constructor(private readonly socket: Duplex) {
    socket.on('data', this.onData)
    socket.on('end', this.onEnd)
    socket.on('error', this.onError)
    socket.on('close', this.onEnd)
  }

  next(): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject }
      this.deliver()
    })
  }

  /** Bytes received beyond the packets read so far. */
  get leftover(): Buffer {
    return this.buffered
  }

  /** Stops reading; the caller takes over the socket (and any leftover bytes). */
  detach(): void {
    this.socket.off('data', this.onData)
    this.socket.off('end', this.onEnd)
    this.socket.off('error', this.onError)
    this.socket.off('close', this.onEnd)
    this.socket.pause()
  }

  private deliver(): void {
    const waiter = this.waiter
    if (waiter === null) return
    if (this.ended) {
      this.waiter = null
      return waiter.reject(this.ended)
    }
    let length: number
    try {
      length = startupPacketLength(this.buffered)
    } catch (err) {
      this.waiter = null
      return waiter.reject(err as PgError)
    }
    if (length === 0 || this.buffered.length < length) return
    const packet = this.buffered.subarray(0, length)
    this.buffered = this.buffered.subarray(length)
    this.waiter = null
    waiter.resolve(packet)
  }

  private finish(err: Error): void {
    this.ended = err
    this.deliver()
  }
}
