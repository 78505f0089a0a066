import type { Config } from '../config/schema.js'
import { CANCEL_REQUEST_CODE, CANCEL_REQUEST_LENGTH } from '../wire/protocol.js'
import { connectTcp } from './upstream-connector.js'

/**
 * Passes a CancelRequest on to the upstream server. Clients hold the server's own process id
 * and secret key (BackendKeyData is relayed unchanged), so the request needs no translation.
 */
export async function forwardCancel(upstream: Config['upstream'], request: Buffer): Promise<void> {
  const socket = await connectTcp(upstream)
  await new Promise<void>((resolve) => {
    socket.once('close', () => resolve())
    socket.on('error', () => {})
    socket.end(request)
  })
}

/** The process id and secret key a backend sent at login (BackendKeyData). */
export interface BackendKey {
  processId: number
  secretKey: number
}

/** Reads a whole BackendKeyData message. */
export const readBackendKey = (message: Buffer): BackendKey => ({
  processId: message.readUInt32BE(5),
  secretKey: message.readUInt32BE(9),
})

/** Cancels what a backend is running; a failure to reach the server is not reported. */
export async function cancelBackend(upstream: Config['upstream'], key: BackendKey): Promise<void> {
  const request = Buffer.allocUnsafe(CANCEL_REQUEST_LENGTH)
  request.writeUInt32BE(CANCEL_REQUEST_LENGTH, 0)
  request.writeUInt32BE(CANCEL_REQUEST_CODE, 4)
  request.writeUInt32BE(key.processId, 8)
  request.writeUInt32BE(key.secretKey, 12)
  await forwardCancel(upstream, request).catch(() => {})
}
