import type { Duplex } from 'node:stream'
import { MessageQueue } from '../wire/message-queue.js'
import { startupPacketLength } from '../wire/startup-packet.js'
import type { ClientConnection } from './client-connection.js'

/**
 * Reads whole startup-phase packets from a client. Lengths are checked as soon as their four
 * bytes arrive, before any buffer is sized from them. Bytes are copied: the connection may
 * reuse its read buffer.
 */
export class StartupReader {
  private readonly queue = new MessageQueue(startupPacketLength)
  private readonly socket: Duplex
  private readonly onEnd = () =>
    this.queue.fail(new Error('client closed the connection during startup'))
  private readonly onError = (err: Error) => this.queue.fail(err)

  constructor(connection: ClientConnection) {
    this.socket = connection.socket
    connection.setReceiver((chunk) => {
      this.queue.push(chunk)
      return true
    })
    this.socket.on('end', this.onEnd)
    this.socket.on('error', this.onError)
    this.socket.on('close', this.onEnd)
  }

  next(): Promise<Buffer> {
    return this.queue.next()
  }

  /** Bytes received beyond the packets read so far. */
  get leftover(): Buffer {
    return this.queue.leftover
  }

  /** Stops watching the socket and pauses it until the session takes over. */
  detach(): void {
    this.socket.off('end', this.onEnd)
    this.socket.off('error', this.onError)
    this.socket.off('close', this.onEnd)
    this.socket.pause()
  }
}
