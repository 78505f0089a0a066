import type net from 'node:net'
import type { TcpKeepaliveConfig } from '../config/schema.js'
import { nativeAddon } from '../native-addon.js'
import { descriptorOf } from './socket-handle.js'

type SetKeepalive = (fd: number, idleMs: number, intervalMs: number, count: number) => boolean

/** The compiled addon's setsockopt for the probe interval and count, which Node does not offer. */
const setKeepalive = (nativeAddon?.setKeepalive as SetKeepalive | undefined) ?? null

/**
 * Sets all four keepalive options on a TCP descriptor with the addon, or turns keepalive off
 * there when `keepalive` is not enabled; false without the addon.
 */
export function keepaliveOnDescriptor(fd: number | null, keepalive: TcpKeepaliveConfig): boolean {
  const { enabled, idleMs, intervalMs, count } = keepalive
  return (
    setKeepalive !== null &&
    fd !== null &&
    fd >= 0 &&
    setKeepalive(fd, enabled ? idleMs : 0, intervalMs, count)
  )
}

/**
 * Turns keepalive probes on for a connected TCP socket (or its descriptor), so that a peer that
 * vanished without a FIN or RST (a black hole, a dead host) is noticed. The native addon sets
 * all four options; without it Node sets only the idle time on a socket (the kernel's defaults
 * stand for interval and count).
 */
export function applyKeepalive(target: net.Socket | number, keepalive: TcpKeepaliveConfig): void {
  if (!keepalive.enabled) return
  if (keepaliveOnDescriptor(typeof target === 'number' ? target : descriptorOf(target), keepalive))
    return
  if (typeof target !== 'number') target.setKeepAlive(true, keepalive.idleMs)
}
