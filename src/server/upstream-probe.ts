import type { Config } from '../config/schema.js'
import { connectTcp } from './upstream-connector.js'

/** Does the upstream accept a TCP connection within upstream.connectTimeoutMs? */
export async function upstreamAccepts(upstream: Config['upstream']): Promise<boolean> {
  try {
    const socket = await connectTcp(upstream)
    socket.destroy()
    return true
  } catch {
    return false
  }
}
