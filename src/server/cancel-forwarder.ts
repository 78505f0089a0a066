import type { Config } from '../config/schema.js'
import { CANCEL_REQUEST_CODE } from '../wire/protocol.js'
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

/** Cancels what a backend is running, given the BackendKeyData message it sent at login. */
export async function cancelBackend(upstream: Config['upstream'], keyData: Buffer): Promise<void> {
  const request = Buffer.allocUnsafe(16)
  request.writeUInt32BE(16, 0)
  request.writeUInt32BE(CANCEL_REQUEST_CODE, 4)
  keyData.copy(request, 8, 5, 13)
  await forwardCancel(upstream, request).catch(() => {})
}
