import type net from 'node:net'
import type { TcpKeepaliveConfig } from '../config/schema.js'
import { keepaliveOnDescriptor } from './tcp-keepalive.js'

/**
 * Linux gives every socket a listener accepts the listener's TCP options (no Nagle delay,
 * keepalive and its timers), so that they are set once per listener, and again at a reload,
 * instead of five system calls per client. Elsewhere each client gets them as it is accepted.
 */
export const listenerOptionsInherited = process.platform === 'linux'

/** A listening TCP socket's handle; a Unix-domain listener's has neither method. */
interface ListenerHandle {
  fd?: number
  setNoDelay?(enable: boolean): number
  setKeepAlive?(enable: boolean, delaySeconds: number): number
}

const handleOf = (server: net.Server) =>
  (server as unknown as { _handle?: ListenerHandle | null })._handle

/** Clients accepted from now on send without Nagle's delay (where options are inherited). */
export function noDelayForAccepted(server: net.Server): void {
  if (listenerOptionsInherited) handleOf(server)?.setNoDelay?.(true)
}

/**
 * Clients accepted from now on get `keepalive` (where options are inherited), on a listener
 * Node accepts for, or the descriptor of one the addon accepts for (src/auth/native-accept.ts).
 */
export function keepaliveForAccepted(
  listener: net.Server | number,
  keepalive: TcpKeepaliveConfig,
): void {
  if (typeof listener === 'number') {
    if (listenerOptionsInherited) keepaliveOnDescriptor(listener, keepalive)
    return
  }
  const handle = handleOf(listener)
  if (!listenerOptionsInherited || !handle?.setKeepAlive) return
  if (!keepalive.enabled) return void handle.setKeepAlive(false, 0)
  if (keepaliveOnDescriptor(handle.fd ?? null, keepalive)) return
  handle.setKeepAlive(true, Math.max(1, Math.floor(keepalive.idleMs / 1000)))
}
