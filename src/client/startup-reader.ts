import type { Duplex } from 'node:stream'
import { startupPacketLength } from '../wire/startup-packet.js'
import type { ClientConnection } from './client-connection.js'

/**
 * Reads whole startup-phase packets from a client. Lengths are checked as soon as their four
 * bytes arrive, before any buffer is sized from them. Bytes are copied: the connection may
 * reuse its read buffer.
 */
export class StartupReader {
  private buffered: Buffer = Buffer.alloc(0)
  private waiter: { resolve: (packet: Buffer) => void; reject: (err: Error) => void } | null = null
  private ended: Error | null = null
  private readonly socket: Duplex
  private readonly onEnd = () =>
    this.finish(new Error('client closed the connection during startup'))
  private readonly onError = (err: Error) => this.finish(err)

  constructor(connection: ClientConnection) {
    this.socket = connection.socket
    connection.setReceiver((chunk) => {
      this.buffered = Buffer.concat([this.buffered, chunk])
      this.deliver()
      return true
    })
    this.socket.on('end', this.onEnd)
    this.socket.on('error', this.onError)
    this.socket.on('close', this.onEnd)
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

  /** Stops watching the socket and pauses it until the session takes over. */
  detach(): void {
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
      return waiter.reject(err as Error)
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
