import type { Config } from '../config/schema.js'
import type { BackendKey } from '../wire/backend-key.js'
import { cancelRequest } from '../wire/messages.js'
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

/** Cancels what a backend is running; a failure to reach the server is not reported. */
export async function cancelBackend(upstream: Config['upstream'], key: BackendKey): Promise<void> {
  await forwardCancel(upstream, cancelRequest(key)).catch(() => {})
}
