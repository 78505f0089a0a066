import type { Config } from '../config/schema.js'
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
