import type net from 'node:net'
import type { TcpKeepaliveConfig } from '../config/schema.js'
import { nativeAddon } from '../native-addon.js'

type SetKeepalive = (fd: number, idleMs: number, intervalMs: number, count: number) => boolean

/** The compiled addon's setsockopt for the probe interval and count, which Node does not offer. */
const setKeepalive = (nativeAddon?.setKeepalive as SetKeepalive | undefined) ?? null

/**
 * Turns keepalive probes on for a connected TCP socket, so that a peer that vanished without a
 * FIN or RST (a black hole, a dead host) is noticed. The native addon sets all four options;
 * without it Node sets only the idle time (the kernel's defaults stand for interval and count).
 */
export function applyKeepalive(socket: net.Socket, keepalive: TcpKeepaliveConfig): void {
  if (!keepalive.enabled) return
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd
  const { idleMs, intervalMs, count } = keepalive
  if (
    setKeepalive &&
    typeof fd === 'number' &&
    fd >= 0 &&
    setKeepalive(fd, idleMs, intervalMs, count)
  )
    return
  socket.setKeepAlive(true, idleMs)
}
