import { readdirSync, readFileSync, readlinkSync } from 'node:fs'

/** A TCP connection as seen from one end: its local port, and its peer's port if given. */
export interface Ends {
  local?: number
  remote?: number
}

const hexPort = (port: number) => `:${port.toString(16).toUpperCase().padStart(4, '0')}`

/** The socket inodes of the TCP connections with these ends, as /proc/self/fd names them. */
function tcpSockets({ local, remote }: Ends): Set<string> {
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/)
      const matches =
        (local === undefined || fields[1]?.endsWith(hexPort(local))) &&
        (remote === undefined || fields[2]?.endsWith(hexPort(remote)))
      if (matches) inodes.add(`socket:[${fields[9]}]`)
    }
  }
  return inodes
}

/** What each of this process's open descriptors names, by number. */
function descriptors(): Map<string, string> {
  const open = new Map<string, string>()
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      open.set(fd, readlinkSync(`/proc/self/fd/${fd}`))
    } catch {
      // closed while listed
    }
  }
  return open
}

/**
 * This process's descriptors for the TCP sockets with these ends (a proxy started in the test's
 * own process): a descriptor that C duplicated counts apart from Node's, so a duplicate left open
 * shows here, as it would keep the connection open after Node's own close.
 */
export function descriptorsOf(ends: Ends): number {
  const inodes = tcpSockets(ends)
  return [...descriptors().values()].filter((target) => inodes.has(target)).length
}

/** This process's open descriptors, each as its number and what it names. */
export function openDescriptors(): Set<string> {
  return new Set([...descriptors()].map(([fd, target]) => `${fd} ${target}`))
}

/**
 * The descriptors open now that were not in `before`, but for the pool's connections to the
 * server on `serverPort` (a pool may open one meanwhile): what the test's clients left open.
 * Counting alone would not do, as a descriptor of `before` (another test's socket closing) may
 * close meanwhile.
 */
export function openedSince(before: Set<string>, serverPort: number): string[] {
  const pooled = tcpSockets({ remote: serverPort })
  return [...descriptors()]
    .filter(([fd, target]) => !before.has(`${fd} ${target}`) && !pooled.has(target))
    .map(([fd, target]) => `${fd} ${target}`)
}
