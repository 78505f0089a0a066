import type net from 'node:net'
import { returnReadBuffer } from '../wire/read-buffer-pool.js'

interface SocketHandle {
  fd?: number
  reading?: boolean
  readStart?: () => number
  readStop?: () => number
}

const handleOf = (socket: net.Socket) => (socket as unknown as { _handle?: SocketHandle })._handle

/** The socket's descriptor, or null when it has none (closed, or not a descriptor's). */
export function descriptorOf(socket: net.Socket): number | null {
  const fd = handleOf(socket)?.fd
  return typeof fd === 'number' && fd >= 0 ? fd : null
}

/**
 * Stops a socket's reads at the handle, whatever way it delivers its bytes: the stream
 * machinery would otherwise start reading again on its own (to refill its buffer). A socket
 * stopped for good gives its read buffer, if it has one of the pool's, back (the caller holds
 * nothing read into it); one that will read again (resumeReading) keeps it.
 */
export function stopReading(socket: net.Socket, forGood = true): void {
  socket.pause()
  const handle = handleOf(socket)
  if (!handle?.readStop) return
  handle.reading = false
  handle.readStop()
  handle.readStart = () => 0
  if (forGood) returnReadBuffer(socket)
}

/** Undoes stopReading, for a socket that outlives its session (a pooled server connection). */
export function resumeReading(socket: net.Socket): void {
  const handle = handleOf(socket)
  if (handle && Object.hasOwn(handle, 'readStart')) delete handle.readStart
  socket.resume()
  // The stream may believe a read is still pending and never ask the handle again.
  if (handle?.readStart && !handle.reading) {
    handle.reading = true
    handle.readStart()
  }
}
